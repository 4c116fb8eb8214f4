#include "sites/tls.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

#include <memory>

#include "util/error.h"
#include "util/posix_file.h"

namespace fedshard::sites {

namespace {

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct CtxFree {
  void operator()(X509_STORE_CTX* c) const { X509_STORE_CTX_free(c); }
};
using X509Ptr = std::unique_ptr<X509, X509Free>;

X509Ptr parse_cert(const std::string& pem) {
  std::unique_ptr<BIO, BioFree> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  return X509Ptr(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
}

std::string common_name(X509* cert) {
  char cn[256] = "";
  X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, cn, sizeof cn);
  return cn;
}

std::string readable(const std::string& path, const char* what) {
  FS_CHECK(!path.empty(), "no ", what, " given (every connection between sites and the round server is mutual TLS)");
  return read_file(path);
}

// The CA's certificates (a bundle may hold several) into `store`; false where none parses.
bool add_ca(X509_STORE* store, const std::string& pem) {
  std::unique_ptr<BIO, BioFree> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  int added = 0;
  while (X509* cert = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
    X509_STORE_add_cert(store, cert);
    X509_free(cert);
    ++added;
  }
  ERR_clear_error();  // the end of the bundle reads as an error
  return added > 0;
}

// Why `cert` does not chain to the CA in `store` now, or "".
std::string verify_against(X509_STORE* store, X509* cert) {
  std::unique_ptr<X509_STORE_CTX, CtxFree> ctx(X509_STORE_CTX_new());
  X509_STORE_CTX_init(ctx.get(), store, cert, nullptr);
  if (X509_verify_cert(ctx.get()) == 1) return "";
  const int err = X509_STORE_CTX_get_error(ctx.get());
  switch (err) {
    case X509_V_ERR_CERT_HAS_EXPIRED: return "its certificate has expired";
    case X509_V_ERR_CERT_NOT_YET_VALID: return "its certificate is not valid yet";
    case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY:
    case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT:
    case X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT:
    case X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN:
    case X509_V_ERR_CERT_SIGNATURE_FAILURE:
      return "its certificate is not signed by the federation's CA";
    default: return cat("its certificate does not verify (", X509_verify_cert_error_string(err), ")");
  }
}

}  // namespace

TlsMaterial load_tls(const TlsFiles& files) {
  TlsMaterial m;
  m.cert_pem = readable(files.cert, "certificate (--tls-cert)");
  m.key_pem = readable(files.key, "private key (--tls-key)");
  m.ca_pem = readable(files.ca, "CA certificate (--tls-ca)");
  const auto cert = parse_cert(m.cert_pem);
  FS_CHECK(cert != nullptr, files.cert, ": not a PEM certificate");
  std::unique_ptr<BIO, BioFree> bio(BIO_new_mem_buf(m.key_pem.data(), static_cast<int>(m.key_pem.size())));
  std::unique_ptr<EVP_PKEY, KeyFree> key(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
  FS_CHECK(key != nullptr, files.key, ": not a PEM private key (an encrypted key is not supported)");
  FS_CHECK(X509_check_private_key(cert.get(), key.get()) == 1, files.key, " is not the key of the certificate ",
           files.cert);
  try {
    const PeerVerifier ca(m.ca_pem);
  } catch (const Error& e) {
    throw Error(cat(files.ca, ": ", e.what()));
  }
  m.name = common_name(cert.get());
  FS_CHECK(!m.name.empty(), files.cert, ": the certificate has no common name");
  ERR_clear_error();
  return m;
}

PeerVerifier::PeerVerifier(const std::string& ca_pem) {
  auto* store = X509_STORE_new();
  store_ = store;
  FS_CHECK(add_ca(store, ca_pem), "the CA file holds no PEM certificate");
}

PeerVerifier::~PeerVerifier() { X509_STORE_free(static_cast<X509_STORE*>(store_)); }

std::string PeerVerifier::verify(const std::string& peer_pem) const {
  FS_CHECK(!peer_pem.empty(), "it presented no certificate");
  const auto cert = parse_cert(peer_pem);
  FS_CHECK(cert != nullptr, "its certificate does not parse");
  const std::string why = verify_against(static_cast<X509_STORE*>(store_), cert.get());
  ERR_clear_error();
  FS_CHECK(why.empty(), why);
  const std::string name = common_name(cert.get());
  FS_CHECK(!name.empty(), "its certificate has no common name (the site's name)");
  return name;
}

}  // namespace fedshard::sites
