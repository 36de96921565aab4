{{/* Names, labels and the checks every template shares. */}}

{{- define "fw.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "fw.serve.name" -}}{{ include "fw.fullname" . }}-serve{{- end -}}
{{- define "fw.dashboard.name" -}}{{ include "fw.fullname" . }}-dashboard{{- end -}}
{{- define "fw.postgresql.name" -}}{{ include "fw.fullname" . }}-postgresql{{- end -}}

{{- define "fw.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: fw
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Selector labels of one component: (dict "ctx" $ "component" "serve") */}}
{{- define "fw.selector" -}}
app.kubernetes.io/name: fw
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "fw.image" -}}{{ .Values.image.repository }}:{{ .Values.image.tag }}{{- end -}}

{{/* The pod and container security settings both images satisfy (user 10001, no shell needed). */}}
{{- define "fw.podSecurity" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
fsGroup: 10001
seccompProfile: {type: RuntimeDefault}
{{- end -}}
{{- define "fw.containerSecurity" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
privileged: false
capabilities: {drop: [ALL]}
{{- end -}}

{{/* The label selector of fw serve's series in Prometheus. */}}
{{- define "fw.serve.promSelector" -}}
{{- if .Values.serve.autoscaling.keda.selector -}}
{{ .Values.serve.autoscaling.keda.selector }}
{{- else -}}
namespace="{{ .Release.Namespace }}",job="{{ include "fw.serve.name" . }}"
{{- end -}}
{{- end -}}

{{/* FW_DATABASE_URL for the dashboard, or nothing (SQLite). */}}
{{- define "fw.dashboard.databaseEnv" -}}
{{- if .Values.dashboard.database.existingSecret }}
- name: FW_DATABASE_URL
  valueFrom:
    secretKeyRef: {name: {{ .Values.dashboard.database.existingSecret | quote }}, key: {{ .Values.dashboard.database.key | quote }}}
{{- else if .Values.postgresql.enabled }}
- name: FW_PG_PASSWORD
  valueFrom:
    secretKeyRef: {name: {{ required "postgresql.auth.existingSecret is required with postgresql.enabled (a Secret holding the database password)" .Values.postgresql.auth.existingSecret | quote }}, key: {{ .Values.postgresql.auth.key | quote }}}
- name: FW_DATABASE_URL
  value: {{ printf "postgres://%s:$(FW_PG_PASSWORD)@%s:5432/%s?sslmode=disable" .Values.postgresql.username (include "fw.postgresql.name" .) .Values.postgresql.database | quote }}
{{- end }}
{{- end -}}
