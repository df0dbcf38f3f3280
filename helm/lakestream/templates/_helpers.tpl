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

{{/* The StatefulSets to render, as JSON: [{id, name, connectors: {id: props}, replicas}]. One per
connector by default, else one for all. */}}
{{- define "lakestream.workloads" -}}
{{- $root := . -}}
{{- $out := list -}}
{{- if .Values.statefulSetPerConnector -}}
{{- range $id, $props := .Values.connectors -}}
{{- $name := printf "%s-%s" (include "lakestream.fullname" $root | trunc 40 | trimSuffix "-") ($id | lower | replace "_" "-" | replace "." "-" | trunc 22 | trimSuffix "-") -}}
{{- $tasks := int (toString (default "1" (get $props "tasks.max"))) -}}
{{- $out = append $out (dict "id" $id "name" $name "connectors" (dict $id $props) "replicas" (default $tasks $root.Values.replicas)) -}}
{{- end -}}
{{- else -}}
{{- $pool := dict -}}
{{- range $id, $props := .Values.connectors -}}
{{- $p := deepCopy $props -}}
{{- if and $root.Values.poolIdleRelease (not (hasKey $p "idle.release")) -}}
{{- $_ := set $p "idle.release" $root.Values.poolIdleRelease -}}
{{- end -}}
{{- $_ := set $pool $id $p -}}
{{- end -}}
{{- $out = append $out (dict "id" "all" "name" (include "lakestream.fullname" .) "connectors" $pool "replicas" (default 1 .Values.replicas)) -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/* Render-time checks: what would deploy and then fail (or leak) is refused here. */}}
{{- define "lakestream.checks" -}}
{{- if not .Values.connectors -}}
{{- fail "no connector: set connectors.<id> to a map of connector properties (see values.yaml)" -}}
{{- end -}}
{{- $secretWords := list "password" "secret" "jaas" "token" "credentials" "user.info" "key.pem" "keystore" -}}
{{- range $id, $props := .Values.connectors -}}
{{- range $k, $v := $props -}}
{{- if and (kindIs "float64" $v) (ge $v 9007199254740992.0) -}}
{{- fail (printf "connector %s: `%s` is a number of 2^53 (9007199254740992) or more: YAML hands it to Helm as a float, which holds whole numbers exactly only below 2^53 (2^53 + 1 arrives as 2^53); quote it (%s: \"...\")" $id $k $k) -}}
{{- end -}}
{{- if and (kindIs "string" $v) (not (contains "${env:" $v)) (not (contains "${file:" $v)) -}}
{{- range $secretWords -}}
{{- if contains . (lower $k) -}}
{{- fail (printf "connector %s: `%s` holds a literal secret, which would land in a ConfigMap; put it in a Secret and reference it: secretEnv (%s: ${env:VAR}) or secretFiles (${file:/etc/lakestream/secrets/<secret>/<key>})" $id $k $k) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range (include "lakestream.workloads" . | fromJsonArray) -}}
{{- $w := . -}}
{{- $all := 0 -}}
{{- $discovering := false -}}
{{- range $id, $props := $w.connectors -}}
{{- $tasks := int (toString (default "1" (get $props "tasks.max"))) -}}
{{- $all = add $all $tasks -}}
{{- /* a connector that discovers its tables has tasks.max tasks per table found: not known here */ -}}
{{- if hasKey $props "topic.prefix" -}}
{{- $discovering = true -}}
{{- else if and $.Values.statefulSetPerConnector (gt (int $w.replicas) $tasks) -}}
{{- fail (printf "replicas (%d) > tasks.max (%d) of connector %s: pods beyond tasks.max would have no task and fail; raise tasks.max or lower replicas" (int $w.replicas) $tasks $id) -}}
{{- end -}}
{{- end -}}
{{- if and (not $.Values.statefulSetPerConnector) (not $discovering) (gt (int $w.replicas) (int $all)) -}}
{{- fail (printf "replicas (%d) > the pool's tasks (%d, the sum of its connectors' tasks.max): pods beyond them would idle; lower replicas" (int $w.replicas) (int $all)) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The .properties files of a workload's connectors (hashed into its pod template), values
verbatim: strings as written, whole numbers (floats to Helm, exact up to 2^53: larger ones are
refused above) without an exponent. */}}
{{- define "lakestream.connectorFiles" -}}
{{- range $file, $props := . }}
{{ $file }}.properties: |
{{- range $k, $v := $props }}
  {{ $k }}={{ if kindIs "float64" $v }}{{ int64 $v }}{{ else }}{{ $v }}{{ end }}
{{- end }}
{{- end }}
{{- end -}}

{{/* Environment every lakestream container gets: log level, scratch, the user's env and secrets. */}}
{{- define "lakestream.env" -}}
- name: RUST_LOG
  value: {{ .Values.logLevel | quote }}
- name: TMPDIR
  value: /scratch
{{- range $k, $v := .Values.env }}
- name: {{ $k }}
  value: {{ $v | quote }}
{{- end }}
{{- range $k, $ref := .Values.secretEnv }}
- name: {{ $k }}
  valueFrom:
    secretKeyRef:
      name: {{ $ref.secret }}
      key: {{ $ref.key }}
{{- end }}
{{- end -}}

{{/* Mounts of a lakestream container: the connector files, scratch, the secret files. */}}
{{- define "lakestream.mounts" -}}
- name: connectors
  mountPath: /etc/lakestream/connectors
  readOnly: true
- name: scratch
  mountPath: /scratch
{{- range .Values.secretFiles }}
- name: secret-{{ . }}
  mountPath: /etc/lakestream/secrets/{{ . }}
  readOnly: true
{{- end }}
{{- end -}}

{{/* The volumes behind those mounts: (dict "root" $ "workload" <workload name>). */}}
{{- define "lakestream.volumes" -}}
- name: connectors
  configMap:
    name: {{ .workload }}-connectors
- name: scratch
  emptyDir:
    sizeLimit: {{ .root.Values.scratch.sizeLimit }}
{{- range .root.Values.secretFiles }}
- name: secret-{{ . }}
  secret:
    secretName: {{ . }}
{{- end }}
{{- end -}}

{{/* The spec of a verify Job: (dict "root" $ "id" <connector id> "workload" <workload name>). */}}
{{- define "lakestream.verifyJob" -}}
{{- $v := .root.Values -}}
backoffLimit: {{ $v.verify.backoffLimit }}
{{- with $v.verify.activeDeadlineSeconds }}
activeDeadlineSeconds: {{ . }}
{{- end }}
template:
  metadata:
    labels:
      {{- include "lakestream.selectorLabels" .root | nindent 6 }}
      lakestream.io/verify: {{ .id | quote }}
  spec:
    restartPolicy: Never
    serviceAccountName: {{ include "lakestream.serviceAccountName" .root }}
    {{- with $v.imagePullSecrets }}
    imagePullSecrets:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    securityContext:
      {{- toYaml $v.podSecurityContext | nindent 6 }}
    containers:
      - name: verify
        image: "{{ $v.image.repository }}:{{ $v.image.tag | default .root.Chart.AppVersion }}"
        imagePullPolicy: {{ $v.image.pullPolicy }}
        args:
          - verify
          - --log-format={{ $v.logFormat }}
          - --json
          - --examples={{ $v.verify.examples }}
          - /etc/lakestream/connectors/{{ .id }}.properties
        env:
          {{- include "lakestream.env" .root | nindent 10 }}
        resources:
          {{- toYaml (default $v.resources $v.verify.resources) | nindent 10 }}
        securityContext:
          {{- toYaml $v.securityContext | nindent 10 }}
        volumeMounts:
          {{- include "lakestream.mounts" .root | nindent 10 }}
    volumes:
      {{- include "lakestream.volumes" (dict "root" .root "workload" .workload) | nindent 6 }}
    {{- with $v.nodeSelector }}
    nodeSelector:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    {{- with $v.tolerations }}
    tolerations:
      {{- toYaml . | nindent 6 }}
    {{- end }}
{{- end -}}
