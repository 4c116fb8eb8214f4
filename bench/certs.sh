# Sourced by the sites benches. federation_certs DIR SAN NAME...: in DIR, a federation's CA (ca.pem, ca.key) and a
# certificate and key signed by it for each NAME (NAME.pem, NAME.key; common name NAME, subjectAltName SAN), valid
# for a week.
federation_certs() {
  local dir=$1 san=$2 n
  shift 2
  (
    cd "$dir" || exit 1
    openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 7 -subj /CN=federation-ca 2>/dev/null
    for n in "$@"; do
      openssl req -newkey rsa:2048 -nodes -keyout "$n.key" -out "$n.csr" -subj "/CN=$n" 2>/dev/null
      printf "subjectAltName=%s\n" "$san" >"$n.ext"
      openssl x509 -req -in "$n.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -out "$n.pem" -days 7 -extfile "$n.ext" \
        2>/dev/null
    done
  )
}
