"""The imperative shell of the daemon: State, metrics exposition, HTTP API, managed files,
systemd notify, udev events and logging. Everything here reads State or triggers a new
collection; nothing here reads the node (that is agentd.host)."""
