{{- define "a2a.fullname" -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "a2a.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}

{{- define "a2a.selector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "a2a.secretName" -}}
{{- default (include "a2a.fullname" .) .Values.existingSecret -}}
{{- end -}}

{{- define "a2a.redisName" -}}
{{- printf "%s-redis" (include "a2a.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- /* The bundled Redis's own name label, so the server's Service never selects it. */ -}}
{{- define "a2a.redisSelector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}-redis
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- /* "true" when the server has a Redis: bundled, in config, or in a Secret. */ -}}
{{- define "a2a.hasRedis" -}}
{{- if or .Values.redis.enabled .Values.config.REDIS_URL .Values.redis.urlInSecret (index .Values.secretEnv "REDIS_URL") -}}
true
{{- end -}}
{{- end -}}

{{- /* "true" when more than one replica can run at once. */ -}}
{{- define "a2a.multiReplica" -}}
{{- if or (gt (int .Values.replicaCount) 1) (and .Values.autoscaling.enabled (gt (int .Values.autoscaling.maxReplicas) 1)) -}}
true
{{- end -}}
{{- end -}}

{{- /* The host of publicUrl (or of config.A2A_PUBLIC_URL), without a port. */ -}}
{{- define "a2a.publicUrl" -}}
{{- .Values.publicUrl | default .Values.config.A2A_PUBLIC_URL | default "" -}}
{{- end -}}

{{- /* Refuse values that would make a broken deployment. */ -}}
{{- define "a2a.validate" -}}
{{- if and (include "a2a.multiReplica" .) (not (include "a2a.hasRedis" .)) -}}
{{- fail "More than one replica needs a shared Redis (each pod would otherwise keep its own tasks and conversations): set redis.enabled=true (bundled, for trying it out), config.REDIS_URL, or secretEnv.REDIS_URL / existingSecret with redis.urlInSecret=true; or run one replica (replicaCount=1, autoscaling.enabled=false)." -}}
{{- end -}}
{{- $grace := .Values.config.A2A_SHUTDOWN_GRACE_S | default "20" | float64 -}}
{{- if le (float64 .Values.terminationGracePeriodSeconds) (addf $grace .Values.preStopSeconds) -}}
{{- fail (printf "terminationGracePeriodSeconds (%v) must exceed preStopSeconds (%v) + A2A_SHUTDOWN_GRACE_S (%v), or Kubernetes kills the pod before it has drained." .Values.terminationGracePeriodSeconds .Values.preStopSeconds $grace) -}}
{{- end -}}
{{- end -}}
