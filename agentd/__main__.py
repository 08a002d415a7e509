import sys

from agentd.entry import main

sys.exit(main())
