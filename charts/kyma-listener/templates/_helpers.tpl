{{/* The recommended labels (https://kubernetes.io/docs/concepts/overview/working-with-objects/common-labels/)
on every object; version is the image tag actually running, made a valid label value. */}}
{{- define "kyma-listener.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "kyma-listener.selector" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | toString | replace "+" "_" | trunc 63 | trimSuffix "-" | quote }}
app.kubernetes.io/part-of: kyma-sync
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}
{{/* What the Deployment, Service, PDB and NetworkPolicy select: immutable in a Deployment, so never the version. */}}
{{- define "kyma-listener.selector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The exposure in effect: ingress.enabled=false (the switch before exposure.type existed) still
means no Ingress, i.e. none. */}}
{{- define "kyma-listener.exposure" -}}
{{- if and (eq .Values.exposure.type "ingress-nginx") (not .Values.ingress.enabled) -}}
none
{{- else -}}
{{ .Values.exposure.type }}
{{- end -}}
{{- end }}

{{/* "true" when a proxy terminates the runtimes' mTLS and forwards the verified certificate in a header
(the listener then serves plain HTTP and believes the header from ingress.trustedProxies only).
Gateway API has no standard way to forward a client certificate, so it is passthrough only. */}}
{{- define "kyma-listener.forwarded" -}}
{{- $forwarded := eq .Values.ingress.mode "forward-client-cert" -}}
{{- if and $forwarded (eq (include "kyma-listener.exposure" .) "gateway-api") -}}
{{- fail "exposure.type gateway-api supports ingress.mode passthrough only: Gateway API has no standard way to forward a verified client certificate (use istio or ingress-nginx for forward-client-cert)" -}}
{{- end -}}
{{ $forwarded }}
{{- end }}

{{/* The header the proxy puts the client certificate in: Envoy's (Istio) is fixed. */}}
{{- define "kyma-listener.clientCertHeader" -}}
{{- if eq (include "kyma-listener.exposure" .) "istio" -}}
X-Forwarded-Client-Cert
{{- else -}}
{{ .Values.ingress.clientCertHeader }}
{{- end -}}
{{- end }}

{{/* The paths watchers use on the events port (contract.wire EVENTS_PATH, HEARTBEAT_PATH); routes
that look at HTTP (forward-client-cert mode) route exactly these, and the upstream runtime-watcher's
/v2/<component>/event only while upstreamComponents maps a component (a migration). */}}
{{- define "kyma-listener.paths" -}}
{{- $paths := list "/v1/events" "/v1/heartbeat" }}
{{- if .Values.upstreamComponents }}
{{- $paths = append $paths "/v2" }}
{{- end }}
{{ $paths | toJson }}
{{- end }}

{{- define "kyma-listener.natsServers" -}}
{{- if .Values.nats.deploy -}}
{{ list (printf "tls://%s-nats.%s.svc:4222" .Release.Name .Release.Namespace) | toJson }}
{{- else -}}
{{ .Values.nats.servers | toJson }}
{{- end -}}
{{- end }}
