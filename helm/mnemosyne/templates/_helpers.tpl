{{/* Chart name, truncated to the 63 characters of a DNS label. */}}
{{- define "mnemosyne.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Fully qualified app name. Kept to 52 characters: the StatefulSet controller
adds a revision hash label "<name>-<hash>" that must fit in 63.
*/}}
{{- define "mnemosyne.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "mnemosyne.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "mnemosyne.selectorLabels" -}}
app.kubernetes.io/name: {{ include "mnemosyne.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "mnemosyne.labels" -}}
helm.sh/chart: {{ include "mnemosyne.chart" . }}
{{ include "mnemosyne.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: mnemosyne
{{- end }}

{{- define "mnemosyne.headlessName" -}}
{{- printf "%s-headless" (include "mnemosyne.fullname" .) }}
{{- end }}

{{/* Label a client pod needs to pass the NetworkPolicy. */}}
{{- define "mnemosyne.clientLabel" -}}
{{- printf "%s-client" (include "mnemosyne.fullname" .) }}
{{- end }}

{{- define "mnemosyne.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "mnemosyne.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "mnemosyne.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}
{{- end }}

{{- define "mnemosyne.tokensSecretName" -}}
{{- if .Values.auth.existingSecret }}
{{- .Values.auth.existingSecret }}
{{- else }}
{{- printf "%s-tokens" (include "mnemosyne.fullname" .) }}
{{- end }}
{{- end }}

{{- define "mnemosyne.tokensSecretKey" -}}
{{- if .Values.auth.existingSecret }}
{{- .Values.auth.existingSecretKey }}
{{- else }}
{{- "tokens.json" }}
{{- end }}
{{- end }}

{{- define "mnemosyne.clientCASecretName" -}}
{{- .Values.tls.clientCA.existingSecret | default .Values.tls.existingSecret }}
{{- end }}

{{/* "http" when the gRPC port speaks TLS (kubelet gRPC probes are plaintext only). */}}
{{- define "mnemosyne.probeKind" -}}
{{- if .Values.tls.enabled }}http{{ else }}grpc{{ end }}
{{- end }}

{{/*
Refuse to render unsafe or contradictory settings. Included at the top of the
StatefulSet so that every render goes through it.
*/}}
{{- define "mnemosyne.validate" -}}
{{- include "mnemosyne.replicasUnchanged" (dict "existing" (lookup "apps/v1" "StatefulSet" .Release.Namespace (include "mnemosyne.fullname" .)) "Values" .Values) }}
{{- if .Values.auth.enabled }}
{{- if and (not .Values.auth.existingSecret) (not .Values.auth.tokens) }}
{{- fail "auth.enabled=true needs a tokens file: set auth.existingSecret (Secret with the tokens JSON) or auth.tokens (list of {name, sha256, tenants}). To run WITHOUT authentication (insecure) set auth.enabled=false." }}
{{- end }}
{{- if and .Values.auth.existingSecret (not .Values.auth.existingSecretKey) }}
{{- fail "auth.existingSecretKey must name the key of the tokens file in auth.existingSecret" }}
{{- end }}
{{- end }}
{{- if and .Values.tls.enabled (not .Values.tls.existingSecret) }}
{{- fail "tls.enabled=true needs tls.existingSecret (Secret with the server certificate and key)" }}
{{- end }}
{{- if and .Values.tls.clientCA.enabled (not .Values.tls.enabled) }}
{{- fail "tls.clientCA.enabled (mutual TLS) needs tls.enabled=true" }}
{{- end }}
{{- $drain := add (int .Values.server.graceSeconds) (int .Values.server.drainDelaySeconds) }}
{{- if le (int .Values.terminationGracePeriodSeconds) (int $drain) }}
{{- fail (printf "terminationGracePeriodSeconds (%d) must exceed server.graceSeconds + server.drainDelaySeconds (%d) so the server can drain before SIGKILL" (int .Values.terminationGracePeriodSeconds) (int $drain)) }}
{{- end }}
{{- if .Values.podDisruptionBudget.enabled }}
{{- if and (not (kindIs "invalid" .Values.podDisruptionBudget.minAvailable)) (not (kindIs "invalid" .Values.podDisruptionBudget.maxUnavailable)) }}
{{- fail "podDisruptionBudget: set only one of minAvailable and maxUnavailable (null the other)" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The member list of a release of several replicas (docs/scale-out.md): pod <fullname>-N is member
<fullname>-N, reached at its stable name through the headless Service.
*/}}
{{- define "mnemosyne.members" -}}
{{- $fullname := include "mnemosyne.fullname" . -}}
{{- $members := list -}}
{{- range $i := until (int .Values.replicas) -}}
{{- $members = append $members (printf "%s-%d=%s-%d.%s.%s.svc:%d" $fullname $i $fullname $i (include "mnemosyne.headlessName" $) $.Release.Namespace (int $.Values.server.port)) -}}
{{- end -}}
{{- join "," $members -}}
{{- end }}

{{/*
Refuse a change of replicas on an existing release: each tenant lives on the pod the hash of the
member list names, and nothing moves tenants yet (part 2). "existing" is the release's StatefulSet
as the cluster has it (lookup: empty on an install, and always in `helm template` or --dry-run,
which do not talk to a cluster). tests/test_helm_chart.py renders it with "existing" given.
*/}}
{{- define "mnemosyne.replicasUnchanged" -}}
{{- with .existing }}
{{- if ne (int .spec.replicas) (int $.Values.replicas) }}
{{- fail (printf "replicas cannot change on an existing release (it has %d, asked %d): each tenant lives on the pod the member list names, and moving tenants does not exist yet. Keep replicas at %d; to change it, export the tenants, install a new release and import them (docs/scale-out.md)" (int .spec.replicas) (int $.Values.replicas) (int .spec.replicas)) }}
{{- end }}
{{- end }}
{{- end }}
