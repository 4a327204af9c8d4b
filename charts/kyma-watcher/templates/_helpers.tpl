{{- define "kyma-watcher.name" -}}kyma-watcher{{- end }}
{{- define "kyma-watcher.labels" -}}
app.kubernetes.io/name: kyma-watcher
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/part-of: kyma-sync
{{- end }}
