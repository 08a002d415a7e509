{{/* Chart name, truncated to the 63 characters of a label value. */}}
{{- define "agentd.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Object name prefix: the release name, with the chart name unless already in it. */}}
{{- define "agentd.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* helm.sh/chart label value. */}}
{{- define "agentd.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels that select the pods (never change across upgrades: DaemonSet selectors are immutable). */}}
{{- define "agentd.selectorLabels" -}}
app.kubernetes.io/name: {{ include "agentd.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Labels of every object. */}}
{{- define "agentd.labels" -}}
helm.sh/chart: {{ include "agentd.chart" . }}
{{ include "agentd.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: agentd
{{- end }}

{{/* The image reference: repository@digest, else repository:tag (tag "" = appVersion). */}}
{{- define "agentd.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* ServiceAccount and ConfigMap names. */}}
{{- define "agentd.serviceAccountName" -}}
{{ include "agentd.fullname" . }}
{{- end }}
{{- define "agentd.configMapName" -}}
{{ include "agentd.fullname" . }}-config
{{- end }}

{{/*
Relabelings shared by the ServiceMonitor and the PodMonitor: job <- jobLabel (the alert
rules match job=~"agentd.*"), instance <- the node name (the dashboards use instance as
the node name), then the user's. Called with the monitor's values.
*/}}
{{- define "agentd.relabelings" -}}
- action: replace
  targetLabel: job
  replacement: {{ .jobLabel | quote }}
- action: replace
  sourceLabels: [__meta_kubernetes_pod_node_name]
  targetLabel: instance
{{- with .relabelings }}
{{ toYaml . }}
{{- end }}
{{- end }}
