#include "sites/tls.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

#include <sys/stat.h>

#include <cstdio>
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
    case X509_V_ERR_CERT_REVOKED: return "its certificate has been revoked (the server's certificate revocation list)";
    case X509_V_ERR_CRL_HAS_EXPIRED:
      return "the server's certificate revocation list has expired (the CA's holder must issue a new one)";
    case X509_V_ERR_UNABLE_TO_GET_CRL: return "the server's certificate revocation list is not the federation CA's";
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

namespace {

std::shared_ptr<void> new_store(const std::string& ca_pem) {
  std::shared_ptr<void> store(X509_STORE_new(), [](void* s) { X509_STORE_free(static_cast<X509_STORE*>(s)); });
  FS_CHECK(add_ca(static_cast<X509_STORE*>(store.get()), ca_pem), "the CA file holds no PEM certificate");
  return store;
}

// The CRLs in `pem` (one or more) into `store`, checked for every peer's certificate; false where none parses.
bool add_crl(X509_STORE* store, const std::string& pem) {
  std::unique_ptr<BIO, BioFree> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  int added = 0;
  while (X509_CRL* crl = PEM_read_bio_X509_CRL(bio.get(), nullptr, nullptr, nullptr)) {
    X509_STORE_add_crl(store, crl);
    X509_CRL_free(crl);
    ++added;
  }
  ERR_clear_error();
  X509_STORE_set_flags(store, X509_V_FLAG_CRL_CHECK);
  return added > 0;
}

std::string stamp_of(const std::string& path) {
  struct stat st{};
  if (stat(path.c_str(), &st) != 0) return "";
  return cat(st.st_mtim.tv_sec, ".", st.st_mtim.tv_nsec, "/", st.st_size);
}

}  // namespace

PeerVerifier::PeerVerifier(const std::string& ca_pem, std::string crl_path)
    : ca_pem_(ca_pem), crl_path_(std::move(crl_path)), store_(new_store(ca_pem)) {
  if (crl_path_.empty()) return;
  crl_stamp_ = stamp_of(crl_path_);
  FS_CHECK(add_crl(static_cast<X509_STORE*>(store_.get()), read_file(crl_path_)), crl_path_,
           ": not a PEM certificate revocation list");
}

std::shared_ptr<void> PeerVerifier::current() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (crl_path_.empty()) return store_;
  const auto stamp = stamp_of(crl_path_);
  if (stamp == crl_stamp_) return store_;
  crl_stamp_ = stamp;
  try {
    auto store = new_store(ca_pem_);
    FS_CHECK(add_crl(static_cast<X509_STORE*>(store.get()), read_file(crl_path_)), "not a PEM certificate revocation list");
    store_ = std::move(store);
    std::fprintf(stderr, "fedshard serve: %s read again: it applies from now on\n", crl_path_.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fedshard serve: %s changed but cannot be used (%s); the last one read still applies\n",
                 crl_path_.c_str(), e.what());
  }
  return store_;
}

std::string PeerVerifier::verify(const std::string& peer_pem) const {
  FS_CHECK(!peer_pem.empty(), "it presented no certificate");
  const auto cert = parse_cert(peer_pem);
  FS_CHECK(cert != nullptr, "its certificate does not parse");
  const auto store = current();
  const std::string why = verify_against(static_cast<X509_STORE*>(store.get()), cert.get());
  ERR_clear_error();
  FS_CHECK(why.empty(), why);
  const std::string name = common_name(cert.get());
  FS_CHECK(!name.empty(), "its certificate has no common name (the site's name)");
  return name;
}

}  // namespace fedshard::sites
