{{/* Names and labels shared by every object of the chart. */}}

{{/* The chart's name: nameOverride, else the chart's own. */}}
{{- define "tfjob-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
The objects' name: fullnameOverride, else the release's name, followed by the chart's
name unless the release's name holds it already.
*/}}
{{- define "tfjob-operator.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "tfjob-operator.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "tfjob-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tfjob-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "tfjob-operator.labels" -}}
{{ include "tfjob-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The registry images are pulled from: global.imageRegistry, else image.registry. */}}
{{- define "tfjob-operator.registry" -}}
{{- trimSuffix "/" (.Values.global.imageRegistry | default .Values.image.registry) -}}
{{- end -}}

{{/* The operator's image: registry/repository:tag, and @digest when pinned. */}}
{{- define "tfjob-operator.image" -}}
{{- $image := printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- with include "tfjob-operator.registry" . -}}
{{- $image = printf "%s/%s" . $image -}}
{{- end -}}
{{- with .Values.image.digest -}}
{{- $image = printf "%s@%s" $image . -}}
{{- end -}}
{{- $image -}}
{{- end -}}

{{- define "tfjob-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "tfjob-operator.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/*
The operator's permissions: exactly the verbs it uses. Watches need list and watch;
children are created and deleted (never updated), a finished job's in one request per
kind (deletecollection); the status is merge-patched; finished TFJobs are deleted after
ttlSecondsAfterFinished; events are created. A queued tfjob.dev job's Kueue Workload is
created, deleted and its status merge-patched (queueing.py).
*/}}
{{/*
The image of TFJobs' TensorBoards: tensorboard.image, else the release's trainer
(@tensorboard.digest when pinned).
*/}}
{{- define "tfjob-operator.tensorboardImage" -}}
{{- if .Values.tensorboard.image -}}
{{- .Values.tensorboard.image -}}
{{- else -}}
{{- $image := printf "tfjob-trainer:%s" (.Values.image.tag | default .Chart.AppVersion) -}}
{{- with include "tfjob-operator.registry" . -}}
{{- $image = printf "%s/%s" . $image -}}
{{- end -}}
{{- with .Values.tensorboard.digest -}}
{{- $image = printf "%s@%s" $image . -}}
{{- end -}}
{{- $image -}}
{{- end -}}
{{- end -}}

{{- define "tfjob-operator.rules" -}}
{{- $groups := ternary (list "tfjob.dev" "kubeflow.org") (list "tfjob.dev") .Values.kubeflow.enabled -}}
# patch: the one spec field the operator writes, spec.managedBy mirroring Kubeflow's
# runPolicy.managedBy for MultiKueue (integrations/kueue.py).
- apiGroups: {{ toJson $groups }}
  resources: ["tfjobs"]
  verbs: ["list", "watch", "patch", "delete"]
- apiGroups: {{ toJson $groups }}
  resources: ["tfjobs/status"]
  verbs: ["patch"]
- apiGroups: [""]
  resources: ["pods", "services"]
  verbs: ["list", "watch", "create", "delete", "deletecollection"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create", "patch"]
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["list", "watch", "create", "delete"]
- apiGroups: ["networking.k8s.io"]
  resources: ["networkpolicies"]
  verbs: ["list", "watch", "create", "delete"]
- apiGroups: ["policy"]
  resources: ["poddisruptionbudgets"]
  verbs: ["list", "watch", "create", "delete"]
- apiGroups: ["scheduling.x-k8s.io", "scheduling.volcano.sh"]
  resources: ["podgroups"]
  verbs: ["list", "watch", "create", "patch", "delete"]
# get and patch: the Workload MultiKueue made for a job dispatched to this cluster, read by
# name and adopted.
- apiGroups: ["kueue.x-k8s.io"]
  resources: ["workloads"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: ["kueue.x-k8s.io"]
  resources: ["workloads/status"]
  verbs: ["patch"]
{{- end -}}
