#include "rdma/frame_mac.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/params.h>

#include <algorithm>
#include <climits>
#include <string>

namespace ptstore::rdma {

namespace {

constexpr size_t kKeyBytes = 32;

EVP_CIPHER_CTX* Ctx(void* p) { return static_cast<EVP_CIPHER_CTX*>(p); }

Status DeriveKey(std::string_view secret, const core::AuthNonce& ni, const core::AuthNonce& nr, uint32_t id_i,
                 uint32_t id_r, uint8_t dir, uint8_t out[kKeyBytes]) {
  std::string salt(reinterpret_cast<const char*>(ni.data()), ni.size());
  salt.append(reinterpret_cast<const char*>(nr.data()), nr.size());
  std::string info(kFrameKeyLabel);
  for (uint32_t v : {id_i, id_r}) {
    for (int i = 0; i < 4; ++i) info.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  info.push_back(static_cast<char>(dir));
  EVP_KDF* kdf = EVP_KDF_fetch(nullptr, "HKDF", nullptr);
  if (kdf == nullptr) return Internal("libcrypto has no HKDF");
  EVP_KDF_CTX* kctx = EVP_KDF_CTX_new(kdf);
  EVP_KDF_free(kdf);
  if (kctx == nullptr) return Internal("EVP_KDF_CTX_new failed");
  char digest[] = "SHA256";
  OSSL_PARAM params[] = {
      OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, digest, 0),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, const_cast<char*>(secret.data()), secret.size()),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SALT, salt.data(), salt.size()),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, info.data(), info.size()),
      OSSL_PARAM_construct_end()};
  const int ok = EVP_KDF_derive(kctx, out, kKeyBytes, params);
  EVP_KDF_CTX_free(kctx);
  OPENSSL_cleanse(salt.data(), salt.size());
  if (ok != 1) return Internal("HKDF-SHA256 failed deriving a frame key");
  return Status::OK();
}

Result<void*> KeyedGcm(const uint8_t key[kKeyBytes]) {
  EVP_CIPHER_CTX* c = EVP_CIPHER_CTX_new();
  if (c == nullptr) return Internal("EVP_CIPHER_CTX_new failed");
  if (EVP_EncryptInit_ex(c, EVP_aes_256_gcm(), nullptr, key, nullptr) != 1) {
    EVP_CIPHER_CTX_free(c);
    return Internal("AES-256-GCM key setup failed");
  }
  return static_cast<void*>(c);
}

}  // namespace

Result<std::unique_ptr<FrameMac>> FrameMac::Derive(std::string_view secret, const core::AuthNonce& initiator_nonce,
                                                   const core::AuthNonce& responder_nonce, uint32_t initiator_id,
                                                   uint32_t responder_id, bool initiator) {
  uint8_t to_responder[kKeyBytes], to_initiator[kKeyBytes];
  std::unique_ptr<FrameMac> m(new FrameMac());
  Status st = DeriveKey(secret, initiator_nonce, responder_nonce, initiator_id, responder_id, 1, to_responder);
  if (st.ok()) st = DeriveKey(secret, initiator_nonce, responder_nonce, initiator_id, responder_id, 2, to_initiator);
  if (st.ok()) {
    Result<void*> s = KeyedGcm(initiator ? to_responder : to_initiator);
    Result<void*> r = KeyedGcm(initiator ? to_initiator : to_responder);
    if (s.ok()) m->send_.ctx_ = *s;
    if (r.ok()) m->receive_.ctx_ = *r;
    if (!s.ok()) st = s.status();
    if (!r.ok()) st = r.status();
  }
  OPENSSL_cleanse(to_responder, sizeof(to_responder));
  OPENSSL_cleanse(to_initiator, sizeof(to_initiator));
  if (!st.ok()) return st;
  return m;
}

FrameMac::~FrameMac() {
  EVP_CIPHER_CTX_free(Ctx(send_.ctx_));  // frees the key schedule too
  EVP_CIPHER_CTX_free(Ctx(receive_.ctx_));
}

Status FrameMac::Half::Begin(RecordKind kind) {
  if (open_) return Internal("a frame record begun while another is open");
  uint8_t iv[12] = {};
  for (int i = 0; i < 8; ++i) iv[i] = static_cast<uint8_t>(seq_ >> (8 * i));
  if (EVP_EncryptInit_ex(Ctx(ctx_), nullptr, nullptr, nullptr, iv) != 1) return Internal("GCM nonce setup failed");
  open_ = true;
  const uint8_t k = static_cast<uint8_t>(kind);
  return Update(&k, 1);
}

Status FrameMac::Half::Update(const uint8_t* p, size_t n) {
  while (n > 0) {
    const int step = static_cast<int>(std::min<size_t>(n, INT_MAX / 2));
    int len = 0;
    if (EVP_EncryptUpdate(Ctx(ctx_), nullptr, &len, p, step) != 1) return Internal("GMAC update failed");
    p += step;
    n -= static_cast<size_t>(step);
  }
  return Status::OK();
}

Result<FrameTag> FrameMac::Half::Finish() {
  if (!open_) return Internal("a frame record finished that was never begun");
  open_ = false;
  ++seq_;
  uint8_t none[16];
  int len = 0;
  FrameTag tag{};
  if (EVP_EncryptFinal_ex(Ctx(ctx_), none, &len) != 1 ||
      EVP_CIPHER_CTX_ctrl(Ctx(ctx_), EVP_CTRL_AEAD_GET_TAG, static_cast<int>(tag.size()), tag.data()) != 1) {
    return Internal("GMAC tag failed");
  }
  return tag;
}

Status FrameMac::Half::Check(const FrameTag& tag) {
  const uint64_t seq = seq_;
  PTS_ASSIGN_OR_RETURN(FrameTag want, Finish());
  if (CRYPTO_memcmp(want.data(), tag.data(), tag.size()) != 0) {
    return Status(Code::kCorruption, "frame integrity check failed: record " + std::to_string(seq) +
                                         " of this connection does not carry its MAC (altered, replayed, "
                                         "reordered or injected on the way)");
  }
  return Status::OK();
}

}  // namespace ptstore::rdma
