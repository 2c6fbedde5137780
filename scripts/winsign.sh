#!/usr/bin/env bash
# Signs Windows executables (Authenticode, SHA-256) with osslsigncode.
#
# The certificate is, in this order:
#   - IDLEPOOL_SIGN_PFX (a PKCS#12 file) with IDLEPOOL_SIGN_PASSWORD;
#   - IDLEPOOL_SIGN_CERT and IDLEPOOL_SIGN_KEY (PEM certificate chain and
#     key; IDLEPOOL_SIGN_PASSWORD if the key is encrypted);
#   - otherwise a throwaway, self-signed test certificate, made once per
#     build folder with openssl (DIR/test-cert). Windows does not trust it:
#     SmartScreen warns as for an unsigned file. It proves only that the
#     signing step works and that the files were not changed since.
# IDLEPOOL_SIGN_TIMESTAMP, if set, is an RFC 3161 time-stamping URL.
# DIR/signing.txt says which certificate signed the files (subject and
# SHA-256 fingerprint), for docs/building.md's question "what signed my build".
#
# Usage: scripts/winsign.sh DIR IN OUT [IN OUT]...   (OUT may be IN)
set -euo pipefail
dir=${1:?usage: scripts/winsign.sh DIR IN OUT [IN OUT]...}
shift
mkdir -p "$dir"

args=()
pass=()
if [ -n "${IDLEPOOL_SIGN_PASSWORD:-}" ]; then pass=(-pass "$IDLEPOOL_SIGN_PASSWORD"); fi
if [ -n "${IDLEPOOL_SIGN_PFX:-}" ]; then
  args=(-pkcs12 "$IDLEPOOL_SIGN_PFX" "${pass[@]}")
  kind="the certificate in IDLEPOOL_SIGN_PFX ($IDLEPOOL_SIGN_PFX)"
  certpem=$(openssl pkcs12 -in "$IDLEPOOL_SIGN_PFX" -nokeys -clcerts -passin "pass:${IDLEPOOL_SIGN_PASSWORD:-}" 2>/dev/null || true)
elif [ -n "${IDLEPOOL_SIGN_CERT:-}" ] || [ -n "${IDLEPOOL_SIGN_KEY:-}" ]; then
  if [ -z "${IDLEPOOL_SIGN_CERT:-}" ] || [ -z "${IDLEPOOL_SIGN_KEY:-}" ]; then
    echo "winsign: set both IDLEPOOL_SIGN_CERT and IDLEPOOL_SIGN_KEY (PEM files), or IDLEPOOL_SIGN_PFX" >&2
    exit 1
  fi
  args=(-certs "$IDLEPOOL_SIGN_CERT" -key "$IDLEPOOL_SIGN_KEY" "${pass[@]}")
  kind="the certificate in IDLEPOOL_SIGN_CERT ($IDLEPOOL_SIGN_CERT)"
  certpem=$(cat "$IDLEPOOL_SIGN_CERT")
else
  tc="$dir/test-cert"
  if [ ! -f "$tc/cert.pem" ] || [ ! -f "$tc/key.pem" ]; then
    mkdir -p "$tc"
    openssl req -x509 -newkey rsa:3072 -sha256 -days 30 -nodes \
      -subj "/CN=idlepool test build (untrusted)/O=idlepool" \
      -addext "keyUsage=critical,digitalSignature" \
      -addext "extendedKeyUsage=codeSigning" \
      -keyout "$tc/key.pem" -out "$tc/cert.pem" 2>/dev/null
  fi
  args=(-certs "$tc/cert.pem" -key "$tc/key.pem")
  kind="a throwaway self-signed TEST certificate made by this build ($tc/cert.pem); not trusted by Windows"
  certpem=$(cat "$tc/cert.pem")
fi
ts=()
if [ -n "${IDLEPOOL_SIGN_TIMESTAMP:-}" ]; then ts=(-ts "$IDLEPOOL_SIGN_TIMESTAMP"); fi

while [ $# -ge 2 ]; do
  in=$1 out=$2
  shift 2
  tmp="$out.signing"
  rm -f "$tmp"
  osslsigncode sign "${args[@]}" "${ts[@]}" -h sha256 -n idlepool -i https://github.com/idlepool/idlepool \
    -in "$in" -out "$tmp" >/dev/null
  mv -f "$tmp" "$out"
done
{
  echo "signed with $kind"
  printf '%s\n' "$certpem" | openssl x509 -noout -subject -fingerprint -sha256 2>/dev/null || true
} >"$dir/signing.txt"
cat "$dir/signing.txt"
