// sha256 of files, with progress for the ~100 MB model files a person waits on.
#include <fcntl.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <vector>

#include "tandem/error.hpp"
#include "tandem/model_store.hpp"

namespace tandem {
namespace {

struct fd_closer {
  int fd;
  ~fd_closer() {
    if (fd >= 0) ::close(fd);
  }
};

struct md_ctx_free {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};

std::string to_hex(const unsigned char* d, unsigned n) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string s(2 * n, '0');
  for (unsigned i = 0; i < n; ++i) {
    s[2 * i] = digits[d[i] >> 4];
    s[2 * i + 1] = digits[d[i] & 15];
  }
  return s;
}

}  // namespace

std::string sha256_file(const std::filesystem::path& p, const progress_fn& progress) {
  fd_closer f{::open(p.c_str(), O_RDONLY | O_CLOEXEC)};
  if (f.fd < 0) throw model_error(p.string(), std::string("cannot open: ") + std::strerror(errno));
  std::error_code ec;
  const uint64_t total = std::filesystem::file_size(p, ec);

  std::unique_ptr<EVP_MD_CTX, md_ctx_free> ctx(EVP_MD_CTX_new());
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) {
    throw error("OpenSSL: cannot initialise sha256");
  }
  const std::string label = "verifying sha256 of " + p.filename().string() + " ... ";
  std::vector<unsigned char> buf(1 << 20);
  uint64_t done = 0;
  int next_report = 0;  // percent at which the next progress line is due
  for (;;) {
    if (progress && total > 0 && done * 100 >= uint64_t(next_report) * total) {
      progress(label + std::to_string(done * 100 / total) + "%");
      next_report = int(done * 100 / total) / 10 * 10 + 10;
    }
    ssize_t n = ::read(f.fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw model_error(p.string(), std::string("read failed: ") + std::strerror(errno));
    if (n == 0) break;
    EVP_DigestUpdate(ctx.get(), buf.data(), size_t(n));
    done += uint64_t(n);
  }
  if (progress && total > 0 && next_report <= 100) progress(label + "100%");
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned len = 0;
  EVP_DigestFinal_ex(ctx.get(), md, &len);
  return to_hex(md, len);
}

}  // namespace tandem
