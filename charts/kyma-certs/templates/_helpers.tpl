{{/* The recommended labels (https://kubernetes.io/docs/concepts/overview/working-with-objects/common-labels/)
on every object; version is the image tag actually running, made a valid label value. */}}
{{- define "kyma-certs.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "kyma-certs.selector" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | toString | replace "+" "_" | trunc 63 | trimSuffix "-" | quote }}
app.kubernetes.io/part-of: kyma-sync
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}
{{/* What the Deployment and Service select: immutable in a Deployment, so never the version. */}}
{{- define "kyma-certs.selector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}
