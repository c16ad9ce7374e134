{{/* Names and labels shared by every template. */}}
{{- define "gro.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "gro.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "gro.labels" -}}
{{ include "gro.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "gro.serviceAccountName" -}}
{{- default (include "gro.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{/* Refuse values that cannot work, with a message naming the value. */}}
{{- define "gro.validate" -}}
{{- if not (has .Values.rbac.mode (list "cluster" "namespaced")) -}}
{{- fail (printf "rbac.mode must be cluster or namespaced, not %q" .Values.rbac.mode) -}}
{{- end -}}
{{- if and (eq .Values.rbac.mode "namespaced") (not .Values.watchNamespaces) -}}
{{- fail "rbac.mode=namespaced needs watchNamespaces: the namespaces to grant Roles in" -}}
{{- end -}}
{{- if and (gt (int .Values.replicaCount) 1) (not .Values.leaderElection.enabled) (not .Values.sharding.enabled) -}}
{{- fail "replicaCount > 1 needs leaderElection.enabled (or sharding.enabled): two acting replicas would both create runners" -}}
{{- end -}}
{{- end -}}

{{/* The operator's rules, as a ClusterRole (cluster mode) or a Role per watched namespace. */}}
{{- define "gro.operatorRules" }}
- apiGroups: [gitea.bpg.pw]
  resources: [runnergroups]
  verbs: [list, watch, patch]  # patch: the teardown finalizer
- apiGroups: [gitea.bpg.pw]
  resources: [runnergroups/status]
  verbs: [patch]
# Runner Jobs carry an ownerReference with blockOwnerDeletion, which clusters running the
# OwnerReferencesPermissionEnforcement admission plugin allow only with this.
- apiGroups: [gitea.bpg.pw]
  resources: [runnergroups/finalizers]
  verbs: [update]
- apiGroups: [batch]
  resources: [jobs]
  verbs: [list, watch, create, patch, delete]
- apiGroups: [""]
  resources: [pods]
  verbs: [list, watch, patch]  # patch: scale-down guards on busy runner Pods
- apiGroups: [""]
  resources: [events]
  verbs: [create, patch]  # patch: repeats aggregated into one Event (count)
# Forgejo groups: each runner's own credentials, in a Secret owned by its runner Job.
# create only: the operator never reads, lists or updates these.
- apiGroups: [""]
  resources: [secrets]
  verbs: [create]
# spec.cache: the group's cache server. Its Secret is written only where a team binds the
# -cache ClusterRole.
- apiGroups: [apps]
  resources: [deployments]
  verbs: [get, create, patch, delete]
- apiGroups: [""]
  resources: [services]
  verbs: [get, create, patch, delete]  # get: only the Service it made is changed
- apiGroups: [""]
  resources: [persistentvolumeclaims]
  verbs: [get, create, delete]
# A deleting group reuses the token of its last good answer only while its whole namespace
# is being deleted (poll/last_good.py): get of the Namespace object, nothing else.
- apiGroups: [""]
  resources: [namespaces]
  verbs: [get]
{{- end }}
