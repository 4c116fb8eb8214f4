// Mutual TLS between sites and the round server (docs/sites.md, "Threat model"): every party holds a certificate
// signed by the federation's CA and its key. The round server asks every peer for its certificate and checks it
// itself (chain to the CA, validity period), so that each refusal is one line naming the reason on both sides; a
// site checks the server's through gRPC's TLS against the same CA. A peer's name is its certificate's common name:
// a site's is the site's name, the server's shards share one.
#pragma once

#include <string>

#include <memory>
#include <mutex>

namespace fedshard::sites {

struct TlsFiles {
  std::string cert, key, ca;  // PEM files: this party's certificate, its private key, the federation's CA
};

struct TlsMaterial {
  std::string cert_pem, key_pem, ca_pem;
  std::string name;  // this party's common name
};

// Reads the three files and checks them before anything connects: each parses, the key is the certificate's.
// Whether the certificate chains to the CA and is valid now is the peer's to judge (the round server refuses a
// site's in one line that reaches the site). Throws fedshard::Error naming the file and the problem.
TlsMaterial load_tls(const TlsFiles& files);

// Verifies a peer's certificate (PEM, as the TLS handshake presented it) against the CA and, where `crl_path` is
// given, the CA's certificate revocation list in that file (PEM), read again whenever the file changes: a site is
// revoked without restarting the server. Returns its common name; throws fedshard::Error saying why it is refused
// (another CA, expired, not yet valid, revoked, malformed, none).
class PeerVerifier {
 public:
  explicit PeerVerifier(const std::string& ca_pem, std::string crl_path = "");
  PeerVerifier(const PeerVerifier&) = delete;
  PeerVerifier& operator=(const PeerVerifier&) = delete;
  std::string verify(const std::string& peer_pem) const;

 private:
  // The store to verify against now: the CRL file read again if it changed (a malformed new one keeps the last).
  std::shared_ptr<void> current() const;

  const std::string ca_pem_, crl_path_;
  mutable std::mutex mu_;
  mutable std::shared_ptr<void> store_;  // X509_STORE
  mutable std::string crl_stamp_;        // the CRL file's modification time and size when read
};

}  // namespace fedshard::sites
