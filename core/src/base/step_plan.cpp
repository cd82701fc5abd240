#include "tandem/step_plan.hpp"

#include <cstring>
#include <string>

#include "tandem/error.hpp"

namespace tandem {
namespace {

constexpr uint32_t plan_magic = 0x4e4c5054;  // "TPLN"
constexpr uint32_t plan_version = 2;  // 2: step_seq::logit_rows

class writer {
 public:
  template <class T> void put(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    out_.insert(out_.end(), p, p + sizeof v);
  }
  template <class T> void put_vec(const std::vector<T>& v) {
    put<uint64_t>(v.size());
    const auto* p = reinterpret_cast<const uint8_t*>(v.data());
    out_.insert(out_.end(), p, p + v.size() * sizeof(T));
  }
  std::vector<uint8_t> take() { return std::move(out_); }

 private:
  std::vector<uint8_t> out_;
};

class reader {
 public:
  explicit reader(std::span<const uint8_t> in) : in_(in) {}
  template <class T> T get() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, in_.data() + pos_, sizeof v);
    pos_ += sizeof v;
    return v;
  }
  template <class T> std::vector<T> get_vec() {
    uint64_t n = get<uint64_t>();
    if (n > (in_.size() - pos_) / sizeof(T)) fail("array longer than the message");
    std::vector<T> v(n);
    std::memcpy(v.data(), in_.data() + pos_, n * sizeof(T));
    pos_ += n * sizeof(T);
    return v;
  }
  bool done() const { return pos_ == in_.size(); }
  [[noreturn]] static void fail(const std::string& why) { throw error("step plan: " + why); }

 private:
  void need(size_t n) const {
    if (in_.size() - pos_ < n) fail("truncated message");
  }
  std::span<const uint8_t> in_;
  size_t pos_ = 0;
};

}  // namespace

std::vector<uint8_t> encode(const step_plan& plan) {
  writer w;
  w.put(plan_magic);
  w.put(plan_version);
  w.put(plan.step);
  w.put<uint64_t>(plan.seqs.size());
  for (const auto& s : plan.seqs) {
    w.put(s.request_id);
    w.put(s.start_pos);
    w.put_vec(s.tokens);
    w.put_vec(s.pages);
    w.put<uint8_t>(s.sample ? 1 : 0);
    w.put(s.logit_rows);
    w.put(s.sampling);
  }
  return w.take();
}

step_plan decode_step_plan(std::span<const uint8_t> bytes) {
  reader r(bytes);
  if (r.get<uint32_t>() != plan_magic) reader::fail("bad magic");
  if (uint32_t v = r.get<uint32_t>(); v != plan_version)
    reader::fail("version " + std::to_string(v) + ", expected " + std::to_string(plan_version));
  step_plan plan;
  plan.step = r.get<uint64_t>();
  uint64_t n = r.get<uint64_t>();
  if (n > bytes.size()) reader::fail("absurd sequence count");
  plan.seqs.resize(n);
  for (auto& s : plan.seqs) {
    s.request_id = r.get<uint64_t>();
    s.start_pos = r.get<int64_t>();
    s.tokens = r.get_vec<int32_t>();
    s.pages = r.get_vec<int32_t>();
    s.sample = r.get<uint8_t>() != 0;
    s.logit_rows = r.get<int32_t>();
    s.sampling = r.get<sampling_params>();
  }
  if (!r.done()) reader::fail("trailing bytes");
  return plan;
}

}  // namespace tandem
