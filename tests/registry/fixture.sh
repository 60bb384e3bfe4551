# Sourced by registry tests and the pull benchmark: a real registry
# (Debian's docker-registry, distribution 2.8) on a free loopback port.
#
#   reg_ca DIR                 a CA and a server certificate for 127.0.0.1/localhost in DIR
#   reg_start DIR tls|plain none|htpasswd USER PASS|token REALM CERT
#                              starts a registry storing under DIR/data (on $REG_WANT_PORT
#                              when set), without auth, with htpasswd auth, or with
#                              distribution's token auth (tokens from REALM, signed by
#                              CERT's key: token_server.py); sets REG_PORT, REG
#                              (127.0.0.1:PORT), REG_PID
#   reg_stop DIR               stops it (by its pid file)
#   reg_push DIR OCI TAG REPO:TAG [skopeo options]   pushes OCI:TAG with skopeo
#   reg_free_port              prints a free loopback TCP port
REG_HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

reg_free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

reg_ca() {
  local d=$1
  mkdir -p "$d"
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=sbx test CA" \
    -keyout "$d/ca.key" -out "$d/ca.crt" >/dev/null 2>&1 || return 1
  openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" -keyout "$d/server.key" \
    -out "$d/server.csr" >/dev/null 2>&1 || return 1
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' >"$d/ext.cnf"
  openssl x509 -req -in "$d/server.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial \
    -days 2 -extfile "$d/ext.cnf" -out "$d/server.crt" >/dev/null 2>&1
}

reg_start() {
  local d=$1 mode=$2 auth=${3:-none} a1=${4:-} a2=${5:-}
  mkdir -p "$d/data"
  REG_PORT=${REG_WANT_PORT:-$(reg_free_port)}
  REG="127.0.0.1:$REG_PORT"
  {
    printf 'version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\n'
    printf 'storage:\n  filesystem:\n    rootdirectory: %s/data\n  delete:\n    enabled: true\n' "$d"
    printf 'http:\n  addr: %s\n' "$REG"
    if [ "$mode" = tls ]; then
      printf '  tls:\n    certificate: %s/server.crt\n    key: %s/server.key\n' "$d" "$d"
    fi
    if [ "$auth" = htpasswd ]; then
      htpasswd -Bbn "$a1" "$a2" >"$d/htpasswd"
      printf 'auth:\n  htpasswd:\n    realm: sbx-test\n    path: %s/htpasswd\n' "$d"
    elif [ "$auth" = token ]; then
      printf 'auth:\n  token:\n    realm: %s\n    service: sbx-test-registry\n' "$a1"
      printf '    issuer: sbx-test-issuer\n    rootcertbundle: %s\n' "$a2"
    fi
  } >"$d/config.yml"
  docker-registry serve "$d/config.yml" >"$d/log" 2>&1 &
  REG_PID=$!
  echo "$REG_PID" >"$d/pid"
  local scheme=http i
  [ "$mode" = tls ] && scheme=https
  for i in $(seq 1 100); do
    curl -sk -o /dev/null "$scheme://$REG/v2/" && return 0
    kill -0 "$REG_PID" 2>/dev/null || break
    sleep 0.1
  done
  echo "registry did not start: $(cat "$d/log")" >&2
  return 1
}

reg_stop() {
  local d=$1 pid
  pid=$(cat "$d/pid" 2>/dev/null) || return 0
  kill "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  rm -f "$d/pid"
}

# reg_push OCI TAG DEST [skopeo copy options...]
reg_push() {
  local oci=$1 tag=$2 dest=$3; shift 3
  skopeo copy -q --dest-tls-verify=false "$@" "oci:$oci:$tag" "docker://$dest" >/dev/null
}
