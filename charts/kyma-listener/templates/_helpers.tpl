{{- define "kyma-listener.labels" -}}
app.kubernetes.io/name: kyma-listener
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/part-of: kyma-sync
{{- end }}
{{- define "kyma-listener.selector" -}}
app.kubernetes.io/name: kyma-listener
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}
{{- define "kyma-listener.forwarded" -}}{{ and .Values.ingress.enabled (eq .Values.ingress.mode "forward-client-cert") }}{{- end }}
{{- define "kyma-listener.natsServers" -}}
{{- if .Values.nats.deploy -}}
{{ list (printf "tls://%s-nats.%s.svc:4222" .Release.Name .Release.Namespace) | toJson }}
{{- else -}}
{{ .Values.nats.servers | toJson }}
{{- end -}}
{{- end }}
