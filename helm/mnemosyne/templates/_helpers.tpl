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
{{- $previous := int (include "mnemosyne.previousReplicas" .) }}
{{- if and (ne $previous (int .Values.replicas)) .Values.auth.enabled (not .Values.rebalance.tokenSecret.name) }}
{{- fail (printf "replicas change from %d to %d: the tenants whose owner changes are moved by a rebalance Job, which needs an admin token: set rebalance.tokenSecret.name (a Secret holding the token itself under rebalance.tokenSecret.key; docs/scale-out.md#moving-tenants)" $previous (int .Values.replicas)) }}
{{- end }}
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
{{- include "mnemosyne.membersOf" (dict "count" (int .Values.replicas) "top" .) -}}
{{- end }}

{{/* The member list of "count" pods ("top": the chart's context). */}}
{{- define "mnemosyne.membersOf" -}}
{{- $top := .top -}}
{{- $fullname := include "mnemosyne.fullname" $top -}}
{{- $members := list -}}
{{- range $i := until (int .count) -}}
{{- $members = append $members (printf "%s-%d=%s-%d.%s.%s.svc:%d" $fullname $i $fullname $i (include "mnemosyne.headlessName" $top) $top.Release.Namespace (int $top.Values.server.port)) -}}
{{- end -}}
{{- join "," $members -}}
{{- end }}

{{/*
The replicas the release had before this upgrade: rebalance.previousReplicas when set, else the
release's StatefulSet as the cluster has it (lookup: empty on an install, and always in
`helm template` or --dry-run, which do not talk to a cluster), else this render's replicas.
A change of replicas moves the tenants whose owner changes (templates/rebalance-job.yaml).
*/}}
{{- define "mnemosyne.previousReplicas" -}}
{{- if .Values.rebalance.previousReplicas -}}
{{- int .Values.rebalance.previousReplicas -}}
{{- else -}}
{{- with (lookup "apps/v1" "StatefulSet" .Release.Namespace (include "mnemosyne.fullname" .)) -}}
{{- int .spec.replicas -}}
{{- else -}}
{{- int .Values.replicas -}}
{{- end -}}
{{- end -}}
{{- end }}

{{/*
The server certificate (and, with mutual TLS, the client CA) as volumes, and their mounts: the
members serve with them, and the rebalance Job connects to the members with them (as the
members connect to each other: the same certificate, trusting the client CA or else the chain).
*/}}
{{- define "mnemosyne.tlsVolumes" -}}
{{- if .Values.tls.enabled }}
- name: tls
  secret:
    secretName: {{ .Values.tls.existingSecret }}
    defaultMode: 0440
    items:
      - key: {{ .Values.tls.certKey }}
        path: tls.crt
      - key: {{ .Values.tls.keyKey }}
        path: tls.key
{{- if .Values.tls.clientCA.enabled }}
- name: client-ca
  secret:
    secretName: {{ include "mnemosyne.clientCASecretName" . }}
    defaultMode: 0440
    items:
      - key: {{ .Values.tls.clientCA.key }}
        path: ca.crt
{{- end }}
{{- end }}
{{- end }}

{{- define "mnemosyne.tlsVolumeMounts" -}}
{{- if .Values.tls.enabled }}
- name: tls
  mountPath: /etc/mnemosyne/tls
  readOnly: true
{{- if .Values.tls.clientCA.enabled }}
- name: client-ca
  mountPath: /etc/mnemosyne/client-ca
  readOnly: true
{{- end }}
{{- end }}
{{- end }}
