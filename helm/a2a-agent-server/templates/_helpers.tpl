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

{{- /* The ConfigMap holding the agents file, and where the pod reads it (AGENTS_FILE). */ -}}
{{- define "a2a.agentsName" -}}
{{- printf "%s-agents" (include "a2a.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "a2a.agentsDir" -}}
/etc/a2a-agent-server
{{- end -}}

{{- /* The StatefulSet's governing (headless) Service; the server reaches Redis through the
  ClusterIP Service instead, whose address stays the same when the Redis pod is replaced. */ -}}
{{- define "a2a.redisHeadlessName" -}}
{{- printf "%s-redis-headless" (include "a2a.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- /* The bundled Redis's own name label, so the server's Service never selects it. */ -}}
{{- define "a2a.redisSelector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}-redis
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- /* "true" when REDIS_URL is given: in config, in secretEnv, or in existingSecret. */ -}}
{{- define "a2a.externalRedis" -}}
{{- if or .Values.config.REDIS_URL .Values.redis.urlInSecret (index .Values.secretEnv "REDIS_URL") -}}
true
{{- end -}}
{{- end -}}

{{- /* "true" when the stores are in a SQL database (DATABASE_URL): from database.existingSecret,
  or in secretEnv. */ -}}
{{- define "a2a.database" -}}
{{- if or .Values.database.existingSecret (index .Values.secretEnv "DATABASE_URL") -}}
true
{{- end -}}
{{- end -}}

{{- /* "true" when the chart runs its own Redis: asked for, and neither a REDIS_URL nor a
  database given. */ -}}
{{- define "a2a.bundledRedis" -}}
{{- if and .Values.redis.enabled (not (include "a2a.externalRedis" .)) (not (include "a2a.database" .)) -}}
true
{{- end -}}
{{- end -}}

{{- /* "true" when the server has a Redis (bundled or given); otherwise its stores are in memory. */ -}}
{{- define "a2a.hasRedis" -}}
{{- if or (include "a2a.bundledRedis" .) (include "a2a.externalRedis" .) -}}
true
{{- end -}}
{{- end -}}

{{- /* "true" when the replicas share their stores: a Redis, or a database. (A SQLite URL in the
  Secret cannot be seen from here: docs/deployment.md says it is one replica only.) */ -}}
{{- define "a2a.sharedStores" -}}
{{- if or (include "a2a.hasRedis" .) (include "a2a.database" .) -}}
true
{{- end -}}
{{- end -}}

{{- /* replicaCount, or by default 2 with shared stores (one pod can go while the other serves)
  and 1 with in-memory stores (several would each keep their own tasks). */ -}}
{{- define "a2a.replicas" -}}
{{- if kindIs "invalid" .Values.replicaCount -}}
{{- ternary 2 1 (eq (include "a2a.sharedStores" .) "true") -}}
{{- else -}}
{{- .Values.replicaCount | int -}}
{{- end -}}
{{- end -}}

{{- /* "true" when more than one replica can run at once. */ -}}
{{- define "a2a.multiReplica" -}}
{{- if or (gt (int (include "a2a.replicas" .)) 1) (and .Values.autoscaling.enabled (gt (int .Values.autoscaling.maxReplicas) 1)) -}}
true
{{- end -}}
{{- end -}}

{{- /* The host of publicUrl (or of config.A2A_PUBLIC_URL), without a port. */ -}}
{{- define "a2a.publicUrl" -}}
{{- .Values.publicUrl | default .Values.config.A2A_PUBLIC_URL | default "" -}}
{{- end -}}

{{- /* Refuse values that would make a broken deployment, or one that loses data silently. */ -}}
{{- define "a2a.validate" -}}
{{- if and (include "a2a.multiReplica" .) (not (include "a2a.sharedStores" .)) -}}
{{- fail "More than one replica needs a shared Redis: with in-memory stores (redis.enabled=false and no REDIS_URL) each pod keeps its own tasks and conversations and loses them when it stops. Keep the bundled Redis (redis.enabled=true, the default) or give yours (config.REDIS_URL, or secretEnv.REDIS_URL / existingSecret with redis.urlInSecret=true), or a PostgreSQL database (database.existingSecret); or run one replica (replicaCount=1, autoscaling.enabled=false) to try it out." -}}
{{- end -}}
{{- if and (include "a2a.database" .) (include "a2a.externalRedis" .) -}}
{{- fail "Give the stores either a Redis (REDIS_URL) or a database (database.existingSecret / DATABASE_URL), not both: the server refuses to start with both." -}}
{{- end -}}
{{- if and .Values.agents .Values.config.AGENTS_FILE -}}
{{- fail "Give the agents either as `agents` (the chart mounts them and sets AGENTS_FILE) or as config.AGENTS_FILE (a file you mount yourself), not both." -}}
{{- end -}}
{{- /* A duplicate name would make the server refuse to start: say so at install instead. */ -}}
{{- $names := list -}}
{{- range .Values.agents -}}
{{- if has .name $names -}}
{{- fail (printf "agents: the name %q is given twice; each agent is served at /{name}/, so names must be unique." .name) -}}
{{- end -}}
{{- $names = append $names .name -}}
{{- end -}}
{{- $grace := .Values.config.A2A_SHUTDOWN_GRACE_S | default "20" | float64 -}}
{{- if le (float64 .Values.terminationGracePeriodSeconds) (addf $grace .Values.preStopSeconds) -}}
{{- fail (printf "terminationGracePeriodSeconds (%v) must exceed preStopSeconds (%v) + A2A_SHUTDOWN_GRACE_S (%v), or Kubernetes kills the pod before it has drained." .Values.terminationGracePeriodSeconds .Values.preStopSeconds $grace) -}}
{{- end -}}
{{- end -}}

{{- /* The Secret holding the bundled Redis's password: the one given, or the generated one. */ -}}
{{- define "a2a.redisSecretName" -}}
{{- .Values.redis.auth.existingSecret | default (include "a2a.redisName" .) -}}
{{- end -}}

{{- /* Where the card-signing key of `cardSigning.existingSecret` is mounted. */ -}}
{{- define "a2a.cardSigningDir" -}}
/etc/a2a-card-signing
{{- end -}}
