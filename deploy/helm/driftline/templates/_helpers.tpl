{{/* Names and labels shared by every object. */}}
{{- define "driftline.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "driftline.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "driftline.selector" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .stage }}
{{- end -}}

{{- define "driftline.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "driftline.secretName" -}}
{{- .Values.secrets.existingSecret | default (printf "%s-secrets" (include "driftline.fullname" .)) -}}
{{- end -}}

{{- define "driftline.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- .Values.serviceAccount.name | default (include "driftline.fullname" .) -}}
{{- else -}}
{{- .Values.serviceAccount.name | default "default" -}}
{{- end -}}
{{- end -}}

{{/* Environment every driftline container gets: credentials from the Secret. */}}
{{- define "driftline.env" -}}
- name: DRIFTLINE__KAFKA__SASL_PASSWORD
  valueFrom:
    secretKeyRef: {name: {{ include "driftline.secretName" . }}, key: kafka-sasl-password, optional: true}
- name: DRIFTLINE__CLICKHOUSE__PASSWORD
  valueFrom:
    secretKeyRef: {name: {{ include "driftline.secretName" . }}, key: clickhouse-password, optional: true}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Volumes every driftline pod mounts: the configuration, the Secret's keys file, a scratch /tmp. */}}
{{- define "driftline.volumes" -}}
- name: config
  configMap: {name: {{ include "driftline.fullname" . }}-config}
- name: secrets
  secret: {secretName: {{ include "driftline.secretName" . }}, optional: true}
- name: tmp
  emptyDir: {}
{{- with .Values.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "driftline.volumeMounts" -}}
- {name: config, mountPath: /etc/driftline/driftline.toml, subPath: driftline.toml, readOnly: true}
- {name: secrets, mountPath: /etc/driftline/secret, readOnly: true}
- {name: tmp, mountPath: /tmp}
{{- with .Values.extraVolumeMounts }}
{{ toYaml . }}
{{- end }}
{{- end -}}
