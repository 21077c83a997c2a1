{{/*
Seconds in a duration such as "90s", "1h30m" or "2d" (units.parse_duration).
*/}}
{{- define "kctl-train.seconds" -}}
{{- $units := dict "s" 1 "m" 60 "h" 3600 "d" 86400 -}}
{{- $total := 0 -}}
{{- range regexFindAll "[0-9]+[smhd]" (toString .) -1 -}}
{{- $total = add $total (mul (atoi (regexFind "[0-9]+" .)) (get $units (regexFind "[smhd]" .))) -}}
{{- end -}}
{{- $total -}}
{{- end -}}

{{/*
The job name and namespace: the values', else the release's.
*/}}
{{- define "kctl-train.name" -}}
{{- .Values.name | default .Release.Name -}}
{{- end -}}

{{- define "kctl-train.namespace" -}}
{{- .Values.namespace | default .Release.Namespace -}}
{{- end -}}

{{/*
The spec as kctl-train's model holds it: values.yaml supplies every default; here `train`
is dropped for a command job, tolerations get their default operator, quantities are text.
*/}}
{{- define "kctl-train.spec" -}}
{{- $spec := deepCopy .Values.spec -}}
{{- /* nodes is a count or a {min, max} table: its default lives here, since Helm would
warn when merging a table over a number from values.yaml */ -}}
{{- if not (hasKey $spec "nodes") }}{{ $_ := set $spec "nodes" 1 }}{{ end -}}
{{- /* spec.operator picks the kind (the job template reads it); the pods' spec has none */ -}}
{{- $_ := unset $spec "operator" -}}
{{- if and (kindIs "map" $spec.nodes) (gt (int $spec.nodes.min) (int $spec.nodes.max)) -}}
{{- fail (printf "spec.nodes: min %v is above max %v" $spec.nodes.min $spec.nodes.max) -}}
{{- end -}}
{{- if and $spec.command $spec.train $spec.train.model -}}
{{- fail "spec: give either spec.train or spec.command, not both" -}}
{{- end -}}
{{- if $spec.command -}}
{{- $_ := unset $spec "train" -}}
{{- else if not (and $spec.train $spec.train.model) -}}
{{- fail "spec: give spec.train.model (a LightningModule as package.module:Class) or spec.command" -}}
{{- end -}}
{{- if and .Values.serviceAccount.create (not $spec.serviceAccountName) -}}
{{- $_ := set $spec "serviceAccountName" (.Values.serviceAccount.name | default (include "kctl-train.name" .)) -}}
{{- end -}}
{{- $tolerations := list -}}
{{- range $spec.nodePool.tolerations -}}
{{- $tolerations = append $tolerations (merge (deepCopy .) (dict "operator" "Equal")) -}}
{{- end -}}
{{- $_ := set $spec.nodePool "tolerations" $tolerations -}}
{{- range $field := list "cpu" "memory" "sharedMemory" -}}
{{- $_ := set $spec.resources $field (toString (get $spec.resources $field)) -}}
{{- end -}}
{{- toJson $spec -}}
{{- end -}}
