{{/*
Chart name, truncated to a DNS label.
*/}}
{{- define "changejoin.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
Full name of the release's objects. Kept to 40 characters so that derived names
("-driver", "-executor-template", Spark's executor pod names) stay valid.
*/}}
{{- define "changejoin.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "changejoin.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
Selector labels of the driver pod; "component" tells it apart from executor pods.
*/}}
{{- define "changejoin.selectorLabels" -}}
app.kubernetes.io/name: {{ include "changejoin.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: driver
{{- end -}}

{{- define "changejoin.executorSelectorLabels" -}}
app.kubernetes.io/name: {{ include "changejoin.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: executor
{{- end -}}

{{- define "changejoin.rescaleSelectorLabels" -}}
app.kubernetes.io/name: {{ include "changejoin.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: rescale
{{- end -}}

{{/*
Common labels (no component: each object adds its own where it matters).
*/}}
{{- define "changejoin.labels" -}}
helm.sh/chart: {{ include "changejoin.chart" . }}
app.kubernetes.io/name: {{ include "changejoin.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: changejoin
{{- end -}}

{{- define "changejoin.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "changejoin.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "changejoin.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "changejoin.executorImage" -}}
{{- default (include "changejoin.image" .) .Values.spark.executor.image -}}
{{- end -}}

{{- define "changejoin.clusterMode" -}}
{{- if eq .Values.spark.mode "cluster" -}}true{{- end -}}
{{- end -}}

{{/*
Headless Service of the driver (cluster mode) and its DNS name, used as spark.driver.host.
*/}}
{{- define "changejoin.driverServiceName" -}}
{{- printf "%s-driver" (include "changejoin.fullname" .) -}}
{{- end -}}

{{- define "changejoin.driverHost" -}}
{{- printf "%s.%s.svc" (include "changejoin.driverServiceName" .) .Release.Namespace -}}
{{- end -}}

{{- define "changejoin.checkpointClaimName" -}}
{{- default (printf "%s-checkpoints" (include "changejoin.fullname" .)) .Values.checkpoint.existingClaim -}}
{{- end -}}

{{- define "changejoin.schemasConfigMapName" -}}
{{- default (printf "%s-schemas" (include "changejoin.fullname" .)) .Values.schemas.existingConfigMap -}}
{{- end -}}

{{- define "changejoin.mountSchemas" -}}
{{- if or .Values.schemas.files .Values.schemas.existingConfigMap -}}true{{- end -}}
{{- end -}}

{{/* Fixed paths inside the image (deploy/Dockerfile). */}}
{{- define "changejoin.sparkLocalDir" -}}/var/lib/changejoin/spark-local{{- end -}}
{{- define "changejoin.kafkaTlsDir" -}}/etc/changejoin/kafka-tls{{- end -}}
{{- define "changejoin.templatesDir" -}}/etc/changejoin/spark-templates{{- end -}}
{{- define "changejoin.sparkAuthDir" -}}/etc/changejoin/spark-auth{{- end -}}

{{/*
The Secret holding Spark's RPC authentication secret (cluster mode): the existing one, or the
one the chart makes.
*/}}
{{- define "changejoin.sparkAuthSecretName" -}}
{{- default (printf "%s-spark-auth" (include "changejoin.fullname" .)) .Values.spark.authenticate.existingSecret -}}
{{- end -}}

{{- define "changejoin.sparkAuthFile" -}}
{{- printf "%s/%s" (include "changejoin.sparkAuthDir" .) .Values.spark.authenticate.secretKey -}}
{{- end -}}

{{/*
The parts of the driver's pod that the rescale Job's pod (rescale-job.yaml) runs with too, so that
`changejoin rescale` sees exactly what `changejoin run` sees: the same image, environment, files,
identity, security settings and placement. Each renders YAML without indentation, for nindent.
*/}}

{{/*
Pod settings: the ServiceAccount, no service links, pull secrets, the pod security context.
*/}}
{{- define "changejoin.podSettings" -}}
serviceAccountName: {{ include "changejoin.serviceAccountName" . }}
enableServiceLinks: false
{{- with .Values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- end -}}

{{/*
Where the pod may be scheduled: where the driver may (a ReadWriteOnce checkpoint volume is
attached on the driver's kind of node; object-store credentials may be bound to it).
*/}}
{{- define "changejoin.podPlacement" -}}
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

{{/*
Container settings: the image, its pull policy, the container security context, and the
service's environment: the ConfigMap and extraEnvFromSecrets, loaded whole.
*/}}
{{- define "changejoin.containerSettings" -}}
image: {{ include "changejoin.image" . }}
imagePullPolicy: {{ .Values.image.pullPolicy }}
securityContext:
  {{- toYaml .Values.containerSecurityContext | nindent 2 }}
envFrom:
  - configMapRef:
      name: {{ include "changejoin.fullname" . }}-env
  {{- range .Values.extraEnvFromSecrets }}
  - secretRef:
      name: {{ . }}
  {{- end }}
{{- end -}}

{{/*
The environment variables whose values come from Secrets (env entries with secretKeyRef);
empty when there are none.
*/}}
{{- define "changejoin.secretEnv" -}}
{{- $sasl := .Values.kafka.sasl -}}
{{- $tls := .Values.kafka.tls -}}
{{- $registry := .Values.schemaRegistry.basicAuth -}}
{{- $lookupPassword := .Values.lookup.password -}}
{{- if $sasl.existingSecret }}
- name: KAFKA_CLIENT_SASL_USERNAME
  valueFrom:
    secretKeyRef:
      name: {{ $sasl.existingSecret }}
      key: {{ $sasl.usernameKey }}
- name: KAFKA_CLIENT_SASL_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ $sasl.existingSecret }}
      key: {{ $sasl.passwordKey }}
{{- end }}
{{- if and $tls.existingSecret $tls.keyPasswordKey }}
- name: KAFKA_CLIENT_SSL_KEY_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ $tls.existingSecret }}
      key: {{ $tls.keyPasswordKey }}
{{- end }}
{{- if $registry.existingSecret }}
- name: SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO
  valueFrom:
    secretKeyRef:
      name: {{ $registry.existingSecret }}
      key: {{ $registry.userInfoKey }}
{{- end }}
{{- if $lookupPassword.existingSecret }}
# The lookup join's database password; the driver hands it to the Python workers.
- name: RIGHT_LOOKUP_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ $lookupPassword.existingSecret }}
      key: {{ $lookupPassword.passwordKey }}
{{- end }}
{{- end -}}

{{/*
The container's volume mounts: scratch space, the checkpoint volume, schema files, Kafka's TLS
files and, in spark.mode=cluster, the executor pod template and Spark's RPC secret.
*/}}
{{- define "changejoin.volumeMounts" -}}
- name: tmp
  mountPath: /tmp
- name: spark-local
  mountPath: {{ include "changejoin.sparkLocalDir" . }}
{{- if not .Values.checkpoint.uri }}
- name: checkpoints
  mountPath: {{ .Values.checkpoint.mountPath }}
{{- end }}
{{- if include "changejoin.mountSchemas" . }}
- name: schemas
  mountPath: {{ .Values.schemas.mountPath }}
  readOnly: true
{{- end }}
{{- if .Values.kafka.tls.existingSecret }}
- name: kafka-tls
  mountPath: {{ include "changejoin.kafkaTlsDir" . }}
  readOnly: true
{{- end }}
{{- if include "changejoin.clusterMode" . }}
- name: spark-templates
  mountPath: {{ include "changejoin.templatesDir" . }}
  readOnly: true
- name: spark-auth
  mountPath: {{ include "changejoin.sparkAuthDir" . }}
  readOnly: true
{{- end }}
{{- end -}}

{{/*
The pod's volumes behind changejoin.volumeMounts.
*/}}
{{- define "changejoin.volumes" -}}
- name: tmp
  emptyDir:
    sizeLimit: {{ .Values.scratch.tmpSizeLimit }}
- name: spark-local
  emptyDir:
    sizeLimit: {{ .Values.scratch.sparkLocalSizeLimit }}
{{- if not .Values.checkpoint.uri }}
- name: checkpoints
  persistentVolumeClaim:
    claimName: {{ include "changejoin.checkpointClaimName" . }}
{{- end }}
{{- if include "changejoin.mountSchemas" . }}
- name: schemas
  configMap:
    name: {{ include "changejoin.schemasConfigMapName" . }}
{{- end }}
{{- with .Values.kafka.tls.existingSecret }}
- name: kafka-tls
  secret:
    secretName: {{ . }}
    defaultMode: 0440
{{- end }}
{{- if include "changejoin.clusterMode" . }}
- name: spark-templates
  configMap:
    name: {{ include "changejoin.fullname" . }}-executor-template
- name: spark-auth
  secret:
    secretName: {{ include "changejoin.sparkAuthSecretName" . }}
    items:
      - key: {{ .Values.spark.authenticate.secretKey }}
        path: {{ .Values.spark.authenticate.secretKey }}
    defaultMode: 0440
{{- end }}
{{- end -}}

{{/*
Checks of combinations that the JSON schema does not express well; rendered (as nothing)
by the Deployment so that every install, upgrade, template and lint runs them.
*/}}
{{- define "changejoin.validate" -}}
{{- $c := .Values.config -}}
{{- range $key := list "kafkaBootstrapServers" "leftTopic" "rightTopic" "outputTopic" "joinSql" -}}
{{- if and (eq $key "rightTopic") $c.rightLookupUrl -}}
{{- /* A lookup join: the right side is a database table, not a topic. */ -}}
{{- else if not (get $c $key) -}}
{{- fail (printf "config.%s is required%s" $key (ternary " (or config.rightLookupUrl, for a lookup join against a database table)" "" (eq $key "rightTopic"))) -}}
{{- end -}}
{{- end -}}
{{- if $c.rightLookupUrl -}}
{{- include "changejoin.validateLookup" . -}}
{{- else -}}
{{- if and (not $c.schemaRegistryUrl) (not (and $c.leftSchemaFile $c.rightSchemaFile)) -}}
{{- fail "set config.schemaRegistryUrl, or both config.leftSchemaFile and config.rightSchemaFile" -}}
{{- end -}}
{{- if .Values.lookup.password.existingSecret -}}
{{- fail "lookup.password.existingSecret is for a lookup join only: set config.rightLookupUrl, or leave it empty" -}}
{{- end -}}
{{- end -}}
{{- if and .Values.schemas.files .Values.schemas.existingConfigMap -}}
{{- fail "set schemas.files or schemas.existingConfigMap, not both" -}}
{{- end -}}
{{- include "changejoin.validateSchemaFiles" . -}}
{{- include "changejoin.validateRescale" . -}}
{{- if and .Values.checkpoint.uri .Values.checkpoint.existingClaim -}}
{{- fail "set checkpoint.uri or checkpoint.existingClaim, not both" -}}
{{- end -}}
{{- if include "changejoin.clusterMode" . -}}
{{- if and (not .Values.checkpoint.uri) (not $c.rightLookupUrl) -}}
{{- fail "spark.mode=cluster needs checkpoint.uri: executors write the streaming state, so the checkpoint must be on storage they all reach (e.g. s3a://...)" -}}
{{- end -}}
{{- if $c.sparkMaster -}}
{{- fail "config.sparkMaster must be empty in spark.mode=cluster: the chart sets SPARK_MASTER to the Kubernetes API" -}}
{{- end -}}
{{- if eq (int .Values.spark.driver.port) (int .Values.spark.driver.blockManagerPort) -}}
{{- fail "spark.driver.port and spark.driver.blockManagerPort must differ" -}}
{{- end -}}
{{- end -}}
{{- $sparkPorts := list (int .Values.spark.driver.port) (int .Values.spark.driver.blockManagerPort) -}}
{{- if and (include "changejoin.clusterMode" .) (has (int $c.metricsPort) $sparkPorts) -}}
{{- fail "config.metricsPort must differ from the Spark driver ports" -}}
{{- end -}}
{{- if and (or .Values.kafka.tls.certKey .Values.kafka.tls.keyKey) (not (and .Values.kafka.tls.certKey .Values.kafka.tls.keyKey)) -}}
{{- fail "kafka.tls.certKey and kafka.tls.keyKey go together" -}}
{{- end -}}
{{- /* Values the service treats as secret never go into the ConfigMap. */ -}}
{{- $where := "put it in a Secret and use kafka.sasl, schemaRegistry.basicAuth, kafka.tls, lookup.password or extraEnvFromSecrets" -}}
{{- range $key, $_ := .Values.extraEnv -}}
{{- if include "changejoin.isSecretName" $key -}}
{{- fail (printf "extraEnv.%s is a secret: %s" $key $where) -}}
{{- end -}}
{{- end -}}
{{- range $key, $_ := .Values.kafka.properties -}}
{{- if include "changejoin.isSecretName" $key -}}
{{- fail (printf "kafka.properties.%s is a secret: %s" $key $where) -}}
{{- end -}}
{{- end -}}
{{- range $key, $_ := .Values.spark.conf -}}
{{- if include "changejoin.isSecretName" $key -}}
{{- fail (printf "spark.conf.%s is a secret: %s" $key $where) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
A schema file the service is told to read must be one the chart mounts: <schemas.mountPath>/<name>,
<name> a key of schemas.files, or of the ConfigMap schemas.existingConfigMap names (checked when
that ConfigMap can be looked up: at install and upgrade; helm template and lint see no cluster).
Otherwise the pod would start and stop at once on "LEFT_SCHEMA_FILE: no such file".
*/}}
{{- define "changejoin.validateSchemaFiles" -}}
{{- $mount := trimSuffix "/" .Values.schemas.mountPath -}}
{{- $existing := dict -}}
{{- $looked := false -}}
{{- if .Values.schemas.existingConfigMap -}}
{{- $cm := lookup "v1" "ConfigMap" .Release.Namespace .Values.schemas.existingConfigMap -}}
{{- if $cm -}}
{{- $existing = $cm.data | default dict -}}
{{- $looked = true -}}
{{- end -}}
{{- end -}}
{{- range $key := list "leftSchemaFile" "rightSchemaFile" -}}
{{- $path := get $.Values.config $key -}}
{{- if $path -}}
{{- $name := trimPrefix (printf "%s/" $mount) $path -}}
{{- if or (eq $name $path) (contains "/" $name) (not $name) -}}
{{- fail (printf "config.%s=%s is no file the chart mounts: schema files are mounted at schemas.mountPath, as %s/<name>, from schemas.files or schemas.existingConfigMap" $key $path $mount) -}}
{{- else if $.Values.schemas.files -}}
{{- if not (hasKey $.Values.schemas.files $name) -}}
{{- fail (printf "config.%s=%s names no file of schemas.files (%s): add %s to schemas.files, or name one of those" $key $path (keys $.Values.schemas.files | sortAlpha | join ", ") $name) -}}
{{- end -}}
{{- else if $.Values.schemas.existingConfigMap -}}
{{- if and $looked (not (hasKey $existing $name)) -}}
{{- fail (printf "config.%s=%s names no key of ConfigMap %s (%s): add %s to it, or name one of those" $key $path $.Values.schemas.existingConfigMap (keys $existing | sortAlpha | join ", ") $name) -}}
{{- end -}}
{{- else -}}
{{- fail (printf "config.%s=%s: no schema file is mounted: put the schema in schemas.files as %s (or name a ConfigMap holding it in schemas.existingConfigMap)" $key $path $name) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
Checks of rescale.partitions (the rescale Job, rescale-job.yaml): `changejoin rescale` needs the
service stopped. replicas: 0 stops it; the driver's pod may still be finishing its micro-batch,
so at install and upgrade (not helm template or lint, which see no cluster) a driver pod of this
release that still exists refuses it too: a checkpoint on an object store (checkpoint.uri) has no
lock that would stop the rescale beside a running driver. STATE_BUCKETS, when config.stateBuckets
(or extraEnv) sets it, bounds the count as the service does (at most one task per bucket; 0: no
buckets, no bound).
*/}}
{{- define "changejoin.validateRescale" -}}
{{- with .Values.rescale.partitions -}}
{{- $n := int . -}}
{{- if ne (int $.Values.replicas) 0 -}}
{{- fail (printf "rescale.partitions=%d needs replicas=0: the driver must be stopped before its checkpoint is rewritten; upgrade with replicas=0 first, wait until its pod is gone, then with replicas=0 and rescale.partitions=%d (docs/operations.md#rescaling)" $n $n) -}}
{{- end -}}
{{- $where := "extraEnv.STATE_BUCKETS" -}}
{{- $buckets := int (get $.Values.extraEnv "STATE_BUCKETS" | default 0) -}}
{{- if not (kindIs "invalid" $.Values.config.stateBuckets) -}}
{{- $where = "config.stateBuckets" -}}
{{- $buckets = int $.Values.config.stateBuckets -}}
{{- end -}}
{{- if and (gt $buckets 0) (gt $n $buckets) -}}
{{- fail (printf "rescale.partitions=%d: the state is kept in %s=%d buckets, at most one task each: at most %d" $n $where $buckets $buckets) -}}
{{- end -}}
{{- $pods := lookup "v1" "Pod" $.Release.Namespace "" -}}
{{- range $pod := ($pods.items | default list) -}}
{{- $labels := $pod.metadata.labels | default dict -}}
{{- if and (eq (get $labels "app.kubernetes.io/instance") $.Release.Name) (eq (get $labels "app.kubernetes.io/name") (include "changejoin.name" $)) (eq (get $labels "app.kubernetes.io/component") "driver") -}}
{{- fail (printf "rescale.partitions=%d: the driver pod %s is still there (it finishes its micro-batch first): wait until it is gone (kubectl -n %s wait --for=delete pod/%s --timeout=10m), then upgrade again" $n $pod.metadata.name $.Release.Namespace $pod.metadata.name) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
Checks of a lookup join (config.rightLookupUrl set); the schema has already refused the right
topic's settings and checked the URL's form.
*/}}
{{- define "changejoin.validateLookup" -}}
{{- $c := .Values.config -}}
{{- if not (or $c.rightTable $c.rightLookupTable) -}}
{{- fail "config.rightTable (or config.rightLookupTable) is required with config.rightLookupUrl: the name joinSql gives the database table" -}}
{{- end -}}
{{- if and (not $c.schemaRegistryUrl) (not $c.leftSchemaFile) -}}
{{- fail "set config.schemaRegistryUrl or config.leftSchemaFile (a lookup join's right side is the database table)" -}}
{{- end -}}
{{- /* user:password@ or ?password= would put the password into the ConfigMap. */ -}}
{{- if or (regexMatch "^[^/]*//[^/?#@]*:[^/?#@]*@" $c.rightLookupUrl) (regexMatch "[?&]password=" $c.rightLookupUrl) -}}
{{- fail "config.rightLookupUrl carries a password, which would land in the ConfigMap: put it in a Secret and use lookup.password" -}}
{{- end -}}
{{- if .Values.checkpoint.uri -}}
{{- fail "a lookup join (config.rightLookupUrl) pins what each micro-batch looked up under its checkpoint, which must be a local directory: leave checkpoint.uri empty (the checkpoint volume)" -}}
{{- end -}}
{{- if and (include "changejoin.clusterMode" .) (not .Values.checkpoint.existingClaim) (not (has "ReadWriteMany" .Values.checkpoint.accessModes)) -}}
{{- fail "a lookup join in spark.mode=cluster needs its checkpoint on a volume every executor mounts: set checkpoint.accessModes to [ReadWriteMany] (with a StorageClass that provides it), or checkpoint.existingClaim to a ReadWriteMany claim" -}}
{{- end -}}
{{- end -}}

{{/*
"true" in spark.mode=cluster with the checkpoint on the volume (a lookup join): executors
mount the checkpoint volume too, at the same path.
*/}}
{{- define "changejoin.executorsMountCheckpoint" -}}
{{- if and (include "changejoin.clusterMode" .) (not .Values.checkpoint.uri) -}}true{{- end -}}
{{- end -}}

{{/*
"true" when a variable or property name names a secret: the rule of the service's
service.config.is_secret_name (words split at ".", "_", "-" and camelCase), which
tests/deploy/test_helm_chart.py checks this against.
*/}}
{{- define "changejoin.isSecretName" -}}
{{- $n := . | replace "." "_" | replace "-" "_" | snakecase | lower | replace "-" "_" -}}
{{- $describes := "_(file|location|path|dir|provider|class|url|endpoint|mechanism|method|algorithm|type|format|size|bits|length|enabled|id|name)$" -}}
{{- if not (regexMatch $describes $n) -}}
{{- if or (regexMatch "password|passwd|passphrase|secret|token|credential|jaas|userinfo|user_info|oauthbearer_config" $n) (regexMatch "(^|_)sas(_|$)" $n) (regexMatch "(^|_)(secret|access|private|encryption|account|api|signing|master|shared|sse)_key(_|$)" $n) (regexMatch "(^|_)key_(pem|data|material)(_|$)" $n) -}}
true
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
A scalar as an environment variable value. Numbers from values files arrive as float64;
whole ones are printed without an exponent (10000000, not 1e+07).
*/}}
{{- define "changejoin.str" -}}
{{- if and (kindIs "float64" .) (eq . (float64 (int64 .))) -}}
{{- int64 . -}}
{{- else -}}
{{- toString . -}}
{{- end -}}
{{- end -}}

{{/*
The service's environment (everything but secrets), as a name -> string dict.
*/}}
{{- define "changejoin.env" -}}
{{- $env := dict -}}
{{- range $key, $value := .Values.config -}}
{{- if not (or (eq (include "changejoin.str" $value) "") (eq (include "changejoin.str" $value) "<nil>")) -}}
{{- $_ := set $env ($key | snakecase | upper) (include "changejoin.str" $value) -}}
{{- end -}}
{{- end -}}
{{- $_ := set $env "CHECKPOINT_LOCATION" (default .Values.checkpoint.mountPath .Values.checkpoint.uri) -}}
{{- with .Values.kafka.securityProtocol -}}
{{- $_ := set $env "KAFKA_CLIENT_SECURITY_PROTOCOL" . -}}
{{- end -}}
{{- with .Values.kafka.saslMechanism -}}
{{- $_ := set $env "KAFKA_CLIENT_SASL_MECHANISM" . -}}
{{- end -}}
{{- range $key, $value := .Values.kafka.properties -}}
{{- $_ := set $env (printf "KAFKA_CLIENT_%s" ($key | replace "." "_" | upper)) (include "changejoin.str" $value) -}}
{{- end -}}
{{- with .Values.kafka.tls -}}
{{- if .existingSecret -}}
{{- $dir := include "changejoin.kafkaTlsDir" $ -}}
{{- $_ := set $env "KAFKA_CLIENT_SSL_CA_LOCATION" (printf "%s/%s" $dir .caKey) -}}
{{- if .certKey -}}
{{- $_ := set $env "KAFKA_CLIENT_SSL_CERTIFICATE_LOCATION" (printf "%s/%s" $dir .certKey) -}}
{{- $_ := set $env "KAFKA_CLIENT_SSL_KEY_LOCATION" (printf "%s/%s" $dir .keyKey) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range $key, $value := .Values.spark.conf -}}
{{- $_ := set $env (printf "SPARK_CONF_%s" ($key | replace "." "_")) (include "changejoin.str" $value) -}}
{{- end -}}
{{- if include "changejoin.clusterMode" . -}}
{{- $s := .Values.spark -}}
{{- $_ := set $env "SPARK_MASTER" "k8s://https://kubernetes.default.svc" -}}
{{- $_ := set $env "SPARK_CONF_spark_kubernetes_namespace" .Release.Namespace -}}
{{- $_ := set $env "SPARK_CONF_spark_kubernetes_container_image" (include "changejoin.executorImage" .) -}}
{{- $_ := set $env "SPARK_CONF_spark_kubernetes_container_image_pullPolicy" .Values.image.pullPolicy -}}
{{- $_ := set $env "SPARK_CONF_spark_kubernetes_executor_podTemplateFile" (printf "%s/executor-pod-template.yaml" (include "changejoin.templatesDir" .)) -}}
{{- $_ := set $env "SPARK_CONF_spark_kubernetes_executor_podTemplateContainerName" "spark-executor" -}}
{{- $_ := set $env "SPARK_CONF_spark_kubernetes_executor_podNamePrefix" (include "changejoin.fullname" .) -}}
{{- $_ := set $env "SPARK_CONF_spark_kubernetes_driver_service_deleteOnTermination" "false" -}}
{{- $_ := set $env "SPARK_CONF_spark_driver_host" (include "changejoin.driverHost" .) -}}
{{- $_ := set $env "SPARK_CONF_spark_driver_port" (include "changejoin.str" $s.driver.port) -}}
{{- $_ := set $env "SPARK_CONF_spark_blockManager_port" (include "changejoin.str" $s.driver.blockManagerPort) -}}
{{- $_ := set $env "SPARK_CONF_spark_executor_instances" (include "changejoin.str" $s.executor.instances) -}}
{{- $_ := set $env "SPARK_CONF_spark_executor_cores" (include "changejoin.str" $s.executor.cores) -}}
{{- $_ := set $env "SPARK_CONF_spark_executor_memory" $s.executor.memory -}}
{{- with $s.executor.memoryOverhead -}}
{{- $_ := set $env "SPARK_CONF_spark_executor_memoryOverhead" . -}}
{{- end -}}
{{- with $s.executor.limitCores -}}
{{- $_ := set $env "SPARK_CONF_spark_kubernetes_executor_limit_cores" (include "changejoin.str" .) -}}
{{- end -}}
{{- /* Driver and executors authenticate each other and encrypt their traffic; the shared secret
is a file in both (Spark on Kubernetes reads it from there instead of putting it in the
executors' environment). */ -}}
{{- $_ := set $env "SPARK_CONF_spark_authenticate" "true" -}}
{{- $_ := set $env "SPARK_CONF_spark_authenticate_secret_driver_file" (include "changejoin.sparkAuthFile" .) -}}
{{- $_ := set $env "SPARK_CONF_spark_authenticate_secret_executor_file" (include "changejoin.sparkAuthFile" .) -}}
{{- $_ := set $env "SPARK_CONF_spark_network_crypto_enabled" "true" -}}
{{- $_ := set $env "SPARK_CONF_spark_network_crypto_authEngineVersion" "2" -}}
{{- $_ := set $env "SPARK_CONF_spark_network_crypto_cipher" "AES/GCM/NoPadding" -}}
{{- end -}}
{{- range $key, $value := .Values.extraEnv -}}
{{- $_ := set $env $key (include "changejoin.str" $value) -}}
{{- end -}}
{{- toYaml $env -}}
{{- end -}}
