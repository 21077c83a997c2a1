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
Bytes in a size such as "14Gi" or "2T" (units.ByteSize: whole numbers, binary or decimal
suffixes).
*/}}
{{- define "kctl-train.bytes" -}}
{{- $units := dict "" 1 "k" 1000 "M" 1000000 "G" 1000000000 "T" 1000000000000 "P" 1000000000000000 "E" 1000000000000000000 "Ki" 1024 "Mi" 1048576 "Gi" 1073741824 "Ti" 1099511627776 "Pi" 1125899906842624 "Ei" 1152921504606846976 -}}
{{- $text := toString . -}}
{{- $number := regexFind "^[0-9]+" $text -}}
{{- mul (atoi $number) (get $units (trimPrefix $number $text)) -}}
{{- end -}}

{{/*
terminationGracePeriod: auto sized from (list stateSize nodes): SaveEstimate.auto_grace_seconds
in spec/save_estimate.py, the same integers (the share a pod writes in whole MiB, rounded up;
100 MiB/s writes, 1024 MiB/s snapshots, 3 s to exit, times 1.5, rounded up).
*/}}
{{- define "kctl-train.auto-grace" -}}
{{- $perPod := mul (index . 1) 1048576 -}}
{{- $mib := div (add (include "kctl-train.bytes" (index . 0)) (sub $perPod 1)) $perPod -}}
{{- div (add (mul 3 $mib 2148) 921600 204799) 204800 -}}
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
