{{/* The recommended labels (https://kubernetes.io/docs/concepts/overview/working-with-objects/common-labels/)
on every object; version is the image tag actually running, made a valid label value. */}}
{{- define "kyma-reconciler.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "kyma-reconciler.selector" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | toString | replace "+" "_" | trunc 63 | trimSuffix "-" | quote }}
app.kubernetes.io/part-of: kyma-sync
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}
{{/* What the Deployment and Service select: immutable in a Deployment, so never the version. */}}
{{- define "kyma-reconciler.selector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* runbook_url for an alert when monitoring.prometheusRule.runbookBaseUrl says where RUNBOOKS.md is
served: its section is the alert's name, lower-cased (the Markdown heading anchor). */}}
{{- define "kyma-reconciler.runbookUrl" -}}
{{- with .root.Values.monitoring.prometheusRule.runbookBaseUrl }}
runbook_url: {{ printf "%s#%s" (trimSuffix "/" .) (lower $.alert) | quote }}
{{- end }}
{{- end }}

{{/* An alert's labels: its severity and monitoring.prometheusRule.alertLabels (for routing). */}}
{{- define "kyma-reconciler.alertLabels" -}}
severity: {{ .severity }}
{{- with .root.Values.monitoring.prometheusRule.alertLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}
