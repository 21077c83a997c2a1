# Sourced by up.sh: the cluster's certificates, made once with openssl and kept in $pki.
# One CA signs every serving and client certificate; the user's certificate puts it in the
# group the shipped RBAC binds (manifests/rbac: ml-engineers), so the e2e suite runs with
# exactly the rights a kctl-train user is given.

client_cert() {  # file stem, common name, organisation ("" for none)
  local stem=$1 cn=$2 org=$3 subject
  [ -f "$pki/$stem.crt" ] && return
  subject="/CN=$cn"
  [ -n "$org" ] && subject="/O=$org$subject"
  openssl req -new -newkey rsa:2048 -nodes -keyout "$pki/$stem.key" -subj "$subject" \
    -out "$pki/$stem.csr" 2>/dev/null
  openssl x509 -req -in "$pki/$stem.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" \
    -CAcreateserial -days 365 -out "$pki/$stem.crt" \
    -extfile <(printf 'keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n') \
    2>/dev/null
}

serving_cert() {  # file stem, common name, subjectAltName list
  local stem=$1 cn=$2 sans=$3
  [ -f "$pki/$stem.crt" ] && return
  openssl req -new -newkey rsa:2048 -nodes -keyout "$pki/$stem.key" -subj "/CN=$cn" \
    -out "$pki/$stem.csr" 2>/dev/null
  openssl x509 -req -in "$pki/$stem.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" \
    -CAcreateserial -days 365 -out "$pki/$stem.crt" \
    -extfile <(printf 'keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=%s\n' "$sans") \
    2>/dev/null
}

make_pki() {  # node IP
  local node_ip=$1
  mkdir -p "$pki"
  if [ ! -f "$pki/ca.crt" ]; then
    openssl req -x509 -new -newkey rsa:2048 -nodes -keyout "$pki/ca.key" -days 3650 \
      -subj "/CN=kctl-train-cluster-ca" -out "$pki/ca.crt" 2>/dev/null
  fi
  # The API server is reached as the Service's first IP (10.0.0.1) from pods, as the node's
  # address from the host and the simulated nodes, and by its DNS names.
  serving_cert apiserver kube-apiserver \
    "IP:10.0.0.1,IP:$node_ip,IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  client_cert admin kctl-train-admin system:masters
  client_cert apiserver-kubelet-client kube-apiserver-kubelet-client ""
  client_cert controller-manager system:kube-controller-manager ""
  client_cert scheduler system:kube-scheduler ""
  client_cert user kctl-train-e2e ml-engineers
  client_cert kwok kwok-controller system:masters
  if [ ! -f "$pki/sa.key" ]; then
    openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null
    openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
  fi
  rm -f "$pki"/*.csr
}

kubeconfig() {  # file, certificate stem, namespace ("" for none), server
  local file=$1 stem=$2 ns=$3 server=$4
  [ -f "$file" ] && return
  write_kubeconfig "$file" "$stem" "$ns" "$server" \
    --client-certificate "$pki/$stem.crt" --client-key "$pki/$stem.key" --embed-certs
}

# file, namespace, ServiceAccount, server: for a controller run here as a host process. It
# authenticates as its ServiceAccount with a token from the TokenRequest API (a pod would have
# one projected), so it has exactly the rights its upstream RBAC binds.
token_kubeconfig() {
  local file=$1 ns=$2 account=$3 server=$4 token
  [ -f "$file" ] && return
  token=$(kubectl --kubeconfig "$state/admin.kubeconfig" -n "$ns" create token "$account" \
    --duration 8760h) || return 1
  write_kubeconfig "$file" "$account" "$ns" "$server" --token "$token"
}

write_kubeconfig() {  # file, user name, namespace ("" for none), server, credential flags...
  local file=$1 user=$2 ns=$3 server=$4; shift 4
  kubectl config --kubeconfig "$file" set-cluster kctl-train --server "$server" \
    --certificate-authority "$pki/ca.crt" --embed-certs >/dev/null
  kubectl config --kubeconfig "$file" set-credentials "$user" "$@" >/dev/null
  kubectl config --kubeconfig "$file" set-context kctl-train --cluster kctl-train \
    --user "$user" ${ns:+--namespace "$ns"} >/dev/null
  kubectl config --kubeconfig "$file" use-context kctl-train >/dev/null
}
