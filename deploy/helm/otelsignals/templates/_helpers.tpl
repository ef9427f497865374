{{/*
Templates that take this chart's context (.Values, .Release, .Chart of otelsignals). An application
chart that depends on this chart reaches that context through .Subcharts: the otelsignals.sidecar.*
templates at the end accept either.
*/}}

{{- define "otelsignals.name" -}}
{{- default "otelsignals" .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "otelsignals.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "otelsignals.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "otelsignals.selectorLabels" -}}
app.kubernetes.io/name: {{ include "otelsignals.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "otelsignals.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "otelsignals.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: {{ .Values.mode }}
{{- end -}}

{{- define "otelsignals.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "otelsignals.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "otelsignals.checkMode" -}}
{{- if not (has .Values.mode (list "gateway" "sidecar")) -}}
{{- fail (printf "mode must be gateway or sidecar, got %q" .Values.mode) -}}
{{- end -}}
{{- end -}}

{{/* Port names: in a sidecar they share the application pod's namespace of names. */}}
{{- define "otelsignals.adminPortName" -}}
{{- if eq .Values.mode "sidecar" -}}signals-admin{{- else -}}admin{{- end -}}
{{- end -}}

{{- define "otelsignals.receiverHost" -}}
{{- if eq .Values.mode "sidecar" -}}{{ .Values.sidecar.receiverHost }}{{- else -}}0.0.0.0{{- end -}}
{{- end -}}

{{- define "otelsignals.adminSecretName" -}}
{{- default (printf "%s-admin" (include "otelsignals.fullname" .)) .Values.admin.existingSecret -}}
{{- end -}}

{{- define "otelsignals.adminSecretKey" -}}
{{- if .Values.admin.existingSecret -}}{{ .Values.admin.existingSecretKey }}{{- else -}}token{{- end -}}
{{- end -}}

{{- define "otelsignals.storeSecretName" -}}
{{- default (printf "%s-store" (include "otelsignals.fullname" .)) .Values.sharedStore.existingSecret -}}
{{- end -}}

{{- define "otelsignals.storeSecretKey" -}}
{{- if .Values.sharedStore.existingSecret -}}{{ .Values.sharedStore.existingSecretKey }}{{- else -}}url{{- end -}}
{{- end -}}

{{/* Fails on a shared store that otelsignals would refuse at start-up, so the mistake shows at install. */}}
{{- define "otelsignals.checkSharedStore" -}}
{{- $store := .Values.sharedStore -}}
{{- $schemes := dict "redis" (list "redis" "rediss" "unix") "postgresql" (list "postgresql" "postgres") -}}
{{- if $store.type -}}
{{- if not (hasKey $schemes $store.type) -}}
{{- fail (printf "sharedStore.type must be \"\", redis or postgresql, got %q" $store.type) -}}
{{- end -}}
{{- if not $store.existingSecret -}}
{{- $url := required "sharedStore.url (or sharedStore.existingSecret) is required when sharedStore.type is set" $store.url -}}
{{- if not (has (first (splitList ":" $url)) (get $schemes $store.type)) -}}
{{- fail (printf "sharedStore.url must be a %s URL (%s://…) for sharedStore.type %s" $store.type (first (get $schemes $store.type)) $store.type) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The otelsignals configuration file: config values, with the exporter values on top. */}}
{{- define "otelsignals.configFile" -}}
{{- $config := deepCopy .Values.config -}}
{{- $exporter := get $config "exporter" | default dict -}}
{{- /* exporter.endpoint and exporter.protocol go together; an endpoint written under config.exporter
     keeps the protocol written beside it (exporter.protocol's default only when it has none). */ -}}
{{- if .Values.exporter.endpoint -}}
{{- $_ := set $exporter "endpoint" .Values.exporter.endpoint -}}
{{- $_ := set $exporter "protocol" .Values.exporter.protocol -}}
{{- else if not (get $exporter "protocol") -}}
{{- $_ := set $exporter "protocol" .Values.exporter.protocol -}}
{{- end -}}
{{- $_ := required "exporter.endpoint is required: the downstream OTLP endpoint, e.g. otel-backend:4317" (get $exporter "endpoint") -}}
{{- $_ := set $config "exporter" $exporter -}}
{{- toYaml $config -}}
{{- end -}}

{{/* The otelsignals container (both modes). */}}
{{- define "otelsignals.container" -}}
{{- include "otelsignals.checkSharedStore" . -}}
{{- $adminPort := include "otelsignals.adminPortName" . -}}
name: otelsignals
image: {{ printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) | quote }}
imagePullPolicy: {{ .Values.image.pullPolicy }}
args: ["--config", "/etc/otelsignals/otelsignals.yaml"]
ports:
  {{- if eq .Values.mode "gateway" }}
  - name: otlp-grpc
    containerPort: {{ .Values.ports.otlpGrpc }}
    protocol: TCP
  - name: otlp-http
    containerPort: {{ .Values.ports.otlpHttp }}
    protocol: TCP
  {{- end }}
  - name: {{ $adminPort }}
    containerPort: {{ .Values.ports.admin }}
    protocol: TCP
env:
  # The environment wins over the file and the image: these always match the probes and Services.
  - name: OTELSIGNALS_RECEIVER__GRPC__ENDPOINT
    value: {{ printf "%s:%v" (include "otelsignals.receiverHost" .) .Values.ports.otlpGrpc | quote }}
  - name: OTELSIGNALS_RECEIVER__HTTP__ENDPOINT
    value: {{ printf "%s:%v" (include "otelsignals.receiverHost" .) .Values.ports.otlpHttp | quote }}
  - name: OTELSIGNALS_ADMIN__ENDPOINT
    value: {{ printf "0.0.0.0:%v" .Values.ports.admin | quote }}
  - name: OTELSIGNALS_STORE__DIRECTORY
    value: /var/lib/otelsignals
  - name: OTELSIGNALS_EXPORTER__FILE_PATH
    value: /var/lib/otelsignals/enriched.jsonl
  - name: OTELSIGNALS_ADMIN__AUTH_TOKEN
    valueFrom:
      secretKeyRef:
        name: {{ include "otelsignals.adminSecretName" . }}
        key: {{ include "otelsignals.adminSecretKey" . }}
  {{- if .Values.sharedStore.type }}
  - name: OTELSIGNALS_STORE__URL
    valueFrom:
      secretKeyRef:
        name: {{ include "otelsignals.storeSecretName" . }}
        key: {{ include "otelsignals.storeSecretKey" . }}
  {{- if and (eq .Values.sharedStore.type "postgresql") .Values.sharedStore.conversationIndex }}
  - name: OTELSIGNALS_INDEX__URL
    valueFrom:
      secretKeyRef:
        name: {{ include "otelsignals.storeSecretName" . }}
        key: {{ include "otelsignals.storeSecretKey" . }}
  {{- end }}
  {{- end }}
  {{- with .Values.extraEnv }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
startupProbe:
  httpGet:
    path: /healthz
    port: {{ $adminPort }}
  {{- toYaml .Values.probes.startup | nindent 2 }}
livenessProbe:
  httpGet:
    path: /healthz
    port: {{ $adminPort }}
  {{- toYaml .Values.probes.liveness | nindent 2 }}
readinessProbe:
  httpGet:
    path: /readyz
    port: {{ $adminPort }}
  {{- toYaml .Values.probes.readiness | nindent 2 }}
resources:
  {{- toYaml .Values.resources | nindent 2 }}
securityContext:
  {{- toYaml .Values.securityContext | nindent 2 }}
volumeMounts:
  - name: otelsignals-config
    mountPath: /etc/otelsignals
    readOnly: true
  - name: otelsignals-data
    mountPath: /var/lib/otelsignals
  - name: otelsignals-tmp
    mountPath: /tmp
  {{- with .Values.extraVolumeMounts }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end -}}

{{/* The volumes the container mounts (both modes). */}}
{{- define "otelsignals.volumes" -}}
- name: otelsignals-config
  configMap:
    name: {{ include "otelsignals.fullname" . }}
- name: otelsignals-data
  emptyDir:
    sizeLimit: {{ .Values.dataDir.sizeLimit }}
- name: otelsignals-tmp
  emptyDir: {}
{{- with .Values.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
For application charts that have otelsignals as a dependency (under its own name, no alias; with
mode: sidecar), called with the application chart's root context:

  containers:
    - name: app
      env:
        {{- include "otelsignals.sidecar.appEnv" . | nindent 8 }}
    {{- include "otelsignals.sidecar.container" . | nindent 4 }}
  volumes:
    {{- include "otelsignals.sidecar.volumes" . | nindent 4 }}
*/}}
{{- define "otelsignals.sidecar.context" -}}
{{- if and .Subcharts (hasKey .Subcharts "otelsignals") -}}otelsignals{{- end -}}
{{- end -}}

{{- define "otelsignals.sidecar.container" -}}
{{- $chart := . -}}
{{- if include "otelsignals.sidecar.context" . }}{{ $chart = index .Subcharts "otelsignals" }}{{ end -}}
- {{ include "otelsignals.container" $chart | nindent 2 | trim }}
{{- end -}}

{{- define "otelsignals.sidecar.volumes" -}}
{{- $chart := . -}}
{{- if include "otelsignals.sidecar.context" . }}{{ $chart = index .Subcharts "otelsignals" }}{{ end -}}
{{ include "otelsignals.volumes" $chart }}
{{- end -}}

{{/* The application's OpenTelemetry SDK variables, pointing it at the sidecar. */}}
{{- define "otelsignals.sidecar.appEnv" -}}
{{- $chart := . -}}
{{- if include "otelsignals.sidecar.context" . }}{{ $chart = index .Subcharts "otelsignals" }}{{ end -}}
{{- $host := $chart.Values.sidecar.receiverHost | replace "0.0.0.0" "localhost" -}}
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ printf "http://%s:%v" $host $chart.Values.ports.otlpGrpc | quote }}
- name: OTEL_EXPORTER_OTLP_PROTOCOL
  value: grpc
{{- end -}}
