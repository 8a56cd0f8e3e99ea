{{/*
The chart name, or nameOverride.
*/}}
{{- define "pallas.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The object name prefix: fullnameOverride, else the release name when it contains the chart name,
else "<release>-<chart>". Truncated so that "<fullname>-operator-metrics" stays a DNS label.
*/}}
{{- define "pallas.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 46 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 46 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 46 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The operator's objects: Deployment, Service, ClusterRole, bindings.
*/}}
{{- define "pallas.operatorName" -}}
{{- printf "%s-operator" (include "pallas.fullname" .) }}
{{- end }}

{{/*
"chart-version" for the helm.sh/chart label.
*/}}
{{- define "pallas.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels on every object of the chart.
*/}}
{{- define "pallas.labels" -}}
helm.sh/chart: {{ include "pallas.chart" . }}
app.kubernetes.io/name: {{ include "pallas.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: pallas
{{- end }}

{{/*
Labels on the operator's own objects: the common ones and the component.
*/}}
{{- define "pallas.operatorLabels" -}}
{{ include "pallas.labels" . }}
app.kubernetes.io/component: operator
{{- end }}

{{/*
Labels that select the operator pods (Deployment, Service, PodDisruptionBudget). They never
change between versions: a Deployment's selector is immutable.
*/}}
{{- define "pallas.selectorLabels" -}}
app.kubernetes.io/name: {{ include "pallas.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{/*
The operator's ServiceAccount.
*/}}
{{- define "pallas.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "pallas.operatorName" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The image: "repository:tag", "repository:tag@digest" with a digest; the tag defaults to appVersion.
*/}}
{{- define "pallas.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag }}
{{- if .Values.image.digest }}
{{- printf "%s:%s@%s" .Values.image.repository $tag .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository $tag }}
{{- end }}
{{- end }}

{{/*
The image of agent and registry pods: runtimeImage, else the operator's own.
*/}}
{{- define "pallas.runtimeImage" -}}
{{- default (include "pallas.image" .) .Values.runtimeImage }}
{{- end }}

{{/*
The namespace of the leader-election Lease.
*/}}
{{- define "pallas.leaseNamespace" -}}
{{- default .Release.Namespace .Values.leaderElection.namespace }}
{{- end }}

{{/*
Seconds a pod stays on a node that stopped reporting before it is evicted (Kubernetes' default is
300): the operator's own pods, and by `--node-failure-toleration-seconds` every agent and registry
pod whose PallasDeployment sets no `spec.runtime.nodeFailureTolerationSeconds`.
*/}}
{{- define "pallas.nodeFailureTolerationSeconds" -}}
{{- if hasKey .Values "nodeFailureTolerationSeconds" }}
{{- int .Values.nodeFailureTolerationSeconds }}
{{- else }}
{{- 30 }}
{{- end }}
{{- end }}

{{/*
The operator pods' tolerations: the `tolerations` value, then one for each node-failure taint
(NoExecute) that none of those matches, so a failed node's leader is replaced within
nodeFailureTolerationSeconds. A toleration of the user's matching the taint (its key, or an
empty key with Exists) wins: Kubernetes evicts after the shortest matching tolerationSeconds.
*/}}
{{- define "pallas.tolerations" -}}
{{- $tolerations := list }}
{{- range .Values.tolerations }}
{{- $tolerations = append $tolerations . }}
{{- end }}
{{- $seconds := include "pallas.nodeFailureTolerationSeconds" . | int }}
{{- range $taint := list "node.kubernetes.io/unreachable" "node.kubernetes.io/not-ready" }}
{{- $covered := false }}
{{- range $.Values.tolerations }}
{{- $key := get . "key" | default "" }}
{{- if has (get . "effect" | default "") (list "" "NoExecute") }}
{{- if or (eq $key $taint) (and (eq $key "") (eq (get . "operator") "Exists")) }}
{{- $covered = true }}
{{- end }}
{{- end }}
{{- end }}
{{- if not $covered }}
{{- $tolerations = append $tolerations (dict "key" $taint "operator" "Exists" "effect" "NoExecute" "tolerationSeconds" $seconds) }}
{{- end }}
{{- end }}
{{- toYaml $tolerations }}
{{- end }}

{{/*
The operator pods' topology spread: the `topologySpreadConstraints` value, else with more than
one replica at most one pod more on one node than on another, preferred (ScheduleAnyway: a
one-node cluster still runs every replica), each rollout's pods counted on their own.
*/}}
{{- define "pallas.topologySpreadConstraints" -}}
{{- if .Values.topologySpreadConstraints }}
{{- toYaml .Values.topologySpreadConstraints }}
{{- else if gt (int .Values.replicaCount) 1 }}
- maxSkew: 1
  topologyKey: kubernetes.io/hostname
  whenUnsatisfiable: ScheduleAnyway
  labelSelector:
    matchLabels:
      {{- include "pallas.selectorLabels" . | nindent 6 }}
  matchLabelKeys:
    - pod-template-hash
{{- end }}
{{- end }}

{{/*
Fails the render on combinations the schema cannot express with a clear message.
*/}}
{{- define "pallas.validate" -}}
{{- if and (eq .Values.rbac.scope "namespace") (empty .Values.watchNamespaces) }}
{{- fail "rbac.scope=namespace needs watchNamespaces: the namespaces to grant Roles in and to watch (e.g. --set 'watchNamespaces={agents}')" }}
{{- end }}
{{- if ne (len .Values.watchNamespaces) (len (uniq .Values.watchNamespaces)) }}
{{- fail (printf "watchNamespaces lists a namespace twice: %v" .Values.watchNamespaces) }}
{{- end }}
{{- end }}
