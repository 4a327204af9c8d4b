{{/* One watcher per runtime, always in the same place: objects (and the Lease in watcher.yaml) are
named kyma-watcher, whatever the release is called. */}}
{{- define "kyma-watcher.name" -}}kyma-watcher{{- end }}
{{/* The recommended labels (https://kubernetes.io/docs/concepts/overview/working-with-objects/common-labels/)
on every object; version is the image tag actually running, made a valid label value. */}}
{{- define "kyma-watcher.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "kyma-watcher.selector" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | toString | replace "+" "_" | trunc 63 | trimSuffix "-" | quote }}
app.kubernetes.io/part-of: kyma-sync
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}
{{/* What the DaemonSet and Service select: immutable in a DaemonSet, so never the version. */}}
{{- define "kyma-watcher.selector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}
