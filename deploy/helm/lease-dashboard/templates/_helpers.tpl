{{/* The release's base name: "<release>-lease-dashboard", or the release name alone when it
already says lease-dashboard. */}}
{{- define "lease-dashboard.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "lease-dashboard.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Labels of every object. part-of and component are what the README's Prometheus scrape
and the tests select on. */}}
{{- define "lease-dashboard.labels" -}}
{{ include "lease-dashboard.selectorLabels" . }}
app.kubernetes.io/part-of: lease-dashboard
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The labels of one component's objects; call with (dict "root" $ "component" "web"). */}}
{{- define "lease-dashboard.componentLabels" -}}
{{ include "lease-dashboard.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "lease-dashboard.componentSelector" -}}
{{ include "lease-dashboard.selectorLabels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* The image reference: the digest when one is given, so the bytes are fixed. */}}
{{- define "lease-dashboard.image" -}}
{{- $repository := required "image.repository: the image you pushed (README step 1)" .Values.image.repository -}}
{{- if .Values.image.digest -}}
{{- if not (hasPrefix "sha256:" .Values.image.digest) -}}
{{- fail "image.digest must start with sha256:" -}}
{{- end -}}
{{- printf "%s@%s" $repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" $repository (toString (default .Chart.AppVersion .Values.image.tag)) -}}
{{- end -}}
{{- end -}}

{{- define "lease-dashboard.secretName" -}}
{{- required "existingSecret: the name of the Secret you created (README step 2)" .Values.existingSecret -}}
{{- end -}}

{{/* Settings from values.config, the same in every pod. The migrate hook runs before any
other object of the release exists, so the settings are written into each pod spec rather
than read from a ConfigMap. Secrets belong in the existing Secret: their names are refused. */}}
{{- define "lease-dashboard.env" -}}
{{- $secrets := list "SECRET_KEY" "SECRETS_ENCRYPTION_KEYS" "DATABASE_URL" "REDIS_URL" "EMAIL_URL" "METRICS_TOKEN" "OIDC_CLIENT_SECRET" -}}
{{- range $name, $value := .Values.config }}
{{- if or (has $name $secrets) (hasSuffix "_FILE" $name) }}
{{- fail (printf "config.%s is a secret: put it into the existing Secret, not the values" $name) }}
{{- end }}
- name: {{ $name }}
  value: {{ $value | toString | quote }}
{{- end }}
- name: DJANGO_ENV
  value: production
{{- end -}}

{{- define "lease-dashboard.envFrom" -}}
- secretRef:
    name: {{ include "lease-dashboard.secretName" . }}
{{- end -}}

{{/* Pod Security "restricted": non-root, RuntimeDefault seccomp for every container. */}}
{{- define "lease-dashboard.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "lease-dashboard.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
{{- end -}}

{{/* The root is read-only: /tmp is the one writable place (beat's schedule, the liveness
files the workers and beat touch). */}}
{{- define "lease-dashboard.tmpVolume" -}}
- name: tmp
  emptyDir:
    sizeLimit: 64Mi
{{- end -}}

{{- define "lease-dashboard.tmpMount" -}}
- name: tmp
  mountPath: /tmp
{{- end -}}

{{/* Scheduling values shared by every pod. */}}
{{- define "lease-dashboard.scheduling" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* A worker's or beat's liveness: the file its own timer touches (every 10 s for a worker,
at every tick for beat) is less than 60 s old. A stat is cheap; `celery inspect ping` took up
to 10 s and ~66 MiB per probe. Before the first touch the file is missing and the probe
fails, so a startup probe gives the process a minute to come up. */}}
{{- define "lease-dashboard.aliveProbes" -}}
startupProbe:
  exec:
    command: ["sh", "-c", "test $(( $(date +%s) - $(stat -c %Y {{ . }}) )) -lt 60"]
  periodSeconds: 5
  timeoutSeconds: 3
  failureThreshold: 24
livenessProbe:
  exec:
    command: ["sh", "-c", "test $(( $(date +%s) - $(stat -c %Y {{ . }}) )) -lt 60"]
  periodSeconds: 20
  timeoutSeconds: 3
  failureThreshold: 3
{{- end -}}
