{{- define "lakestream.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "lakestream.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "lakestream.labels" -}}
app.kubernetes.io/name: {{ include "lakestream.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "lakestream.selectorLabels" -}}
app.kubernetes.io/name: {{ include "lakestream.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "lakestream.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "lakestream.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The connector .properties files, rendered from values (also hashed into the pod template). */}}
{{- define "lakestream.connectorFiles" -}}
{{- range $file, $props := .Values.connectors }}
{{ $file }}.properties: |
{{- range $k, $v := $props }}
  {{ $k }}={{ $v }}
{{- end }}
{{- end }}
{{- end -}}
