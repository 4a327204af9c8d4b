{{- define "kyma-reconciler.labels" -}}
app.kubernetes.io/name: kyma-reconciler
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/part-of: kyma-sync
{{- end }}
