// The ncu raw CSV reader: RFC 4180 fields (quoted, "" escapes, commas inside quotes), the units
// row turned into scale factors to base units (seconds, bytes, counts), thousands separators
// dropped from numbers.
#include "profile/ncu_csv.h"

#include <cxxabi.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>

#include "core/error.h"
#include "io/atomic_file.h"

namespace pylon::profile {
namespace {

constexpr const char* kDuration = "gpu__time_duration.sum";
constexpr const char* kSm = "sm__throughput.avg.pct_of_peak_sustained_elapsed";
constexpr const char* kDram = "dram__throughput.avg.pct_of_peak_sustained_elapsed";
constexpr const char* kMemory = "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed";
constexpr const char* kBytes = "dram__bytes.sum";
constexpr const char* kBytesRead = "dram__bytes_read.sum";
constexpr const char* kBytesWrite = "dram__bytes_write.sum";
constexpr const char* kFadd = "sm__sass_thread_inst_executed_op_fadd_pred_on.sum";
constexpr const char* kFmul = "sm__sass_thread_inst_executed_op_fmul_pred_on.sum";
constexpr const char* kFfma = "sm__sass_thread_inst_executed_op_ffma_pred_on.sum";
constexpr const char* kTensorPrefix = "sm__ops_path_tensor_src_";

struct Record {
  std::vector<std::string> fields;
  size_t line = 0;  // 1-based line where it starts
};

// Splits the text into records of fields; a quote left open is an error.
std::vector<Record> split_csv(const std::string& text, const std::string& source) {
  std::vector<Record> records;
  Record r;
  std::string field;
  bool quoted = false, in_record = false;
  size_t line = 1;
  r.line = 1;
  auto end_record = [&] {
    if (in_record || !field.empty()) r.fields.push_back(std::move(field));
    if (!r.fields.empty()) records.push_back(std::move(r));
    r = Record{};
    field.clear();
    in_record = false;
  };
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') {
        field += '"', ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        if (c == '\n') ++line;
        field += c;
      }
      continue;
    }
    if (!in_record) r.line = line;
    if (c == '"') {
      quoted = true, in_record = true;
    } else if (c == ',') {
      r.fields.push_back(std::move(field)), field.clear(), in_record = true;
    } else if (c == '\n') {
      end_record(), ++line;
    } else if (c != '\r') {
      field += c, in_record = true;
    }
  }
  PYLON_CHECK(!quoted, source, ": line ", r.line, ": a quoted field is never closed (truncated file?)");
  end_record();
  return records;
}

// Factor from a unit of ncu's (byte, Kbyte, Mbyte, ns, usecond, %, inst, byte/second, ...)
// to the base unit; NaN for a unit it does not know.
double unit_scale(const std::string& unit) {
  const size_t slash = unit.find('/');
  if (slash != std::string::npos) return unit_scale(unit.substr(0, slash)) / unit_scale(unit.substr(slash + 1));
  static const char* kBase[] = {"", "%", "byte", "second", "s", "inst", "cycle", "warp", "thread", "sector",
                                "request", "op", "flop", "block", "register"};
  for (const char* b : kBase)
    if (unit == b) return 1.0;
  if (unit.size() < 2) return NAN;
  static const std::map<char, double> kPrefix = {{'n', 1e-9}, {'u', 1e-6}, {'m', 1e-3}, {'K', 1e3},
                                                 {'M', 1e6},  {'G', 1e9},  {'T', 1e12}, {'P', 1e15}};
  const auto p = kPrefix.find(unit[0]);
  const std::string rest = unit.substr(1);
  if (p == kPrefix.end()) return NAN;
  for (const char* b : kBase)
    if (*b && *b != '%' && rest == b) return p->second;
  return NAN;
}

// "1,234.5" -> 1234.5; false for "n/a", "" or text.
bool parse_number(std::string s, double* out) {
  std::erase(s, ',');
  std::erase(s, ' ');
  if (s.empty()) return false;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size() || !std::isfinite(v)) return false;
  *out = v;
  return true;
}

}  // namespace

const char* ncu_roofline_metrics() {
  return "gpu__time_duration.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,"
         "dram__throughput.avg.pct_of_peak_sustained_elapsed,"
         "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes.sum,"
         "sm__sass_thread_inst_executed_op_fadd_pred_on.sum,sm__sass_thread_inst_executed_op_fmul_pred_on.sum,"
         "sm__sass_thread_inst_executed_op_ffma_pred_on.sum,sm__ops_path_tensor_src_bf16_dst_fp32.sum,"
         "sm__ops_path_tensor_src_fp16_dst_fp32.sum,device__attribute_display_name";
}

std::string short_kernel_name(const std::string& name) {
  std::string s = name;
  if (s.rfind("void ", 0) == 0) s = s.substr(5);
  if (!s.empty() && s.back() == ')') {  // drop the parameter list: the '(' matching the last ')'
    int depth = 0;
    for (size_t i = s.size(); i-- > 0;) {
      depth += s[i] == ')' ? 1 : s[i] == '(' ? -1 : 0;
      if (depth == 0) {
        if (i > 0) s = s.substr(0, i);
        break;
      }
    }
  }
  // The anonymous namespace as the demangler ("(anonymous namespace)") and ncu ("<unnamed>") spell it.
  for (const std::string anon : {"(anonymous namespace)::", "<unnamed>::"})
    for (size_t at; (at = s.find(anon)) != std::string::npos;) s.erase(at, anon.size());
  return s;
}

std::string kernel_name_from_symbol(const std::string& symbol) {
  int status = 0;
  const std::unique_ptr<char, decltype(&std::free)> d(abi::__cxa_demangle(symbol.c_str(), nullptr, nullptr, &status),
                                                      &std::free);
  return short_kernel_name(status == 0 && d ? d.get() : symbol);
}

std::vector<KernelCounters> parse_ncu_csv(const std::string& text, const std::string& source,
                                          std::string* device_name) {
  const std::vector<Record> records = split_csv(text, source);
  size_t h = 0;  // the header: first record that starts with "ID" and names the kernel
  auto has = [](const Record& r, const char* name) {
    for (const std::string& f : r.fields)
      if (f == name) return true;
    return false;
  };
  while (h < records.size() && !(records[h].fields[0] == "ID" && has(records[h], "Kernel Name"))) ++h;
  PYLON_CHECK(h < records.size(), source,
              ": not an Nsight Compute raw CSV (no header row with \"ID\" and \"Kernel Name\"; export with "
              "ncu --csv --page raw --metrics ...)");
  const std::vector<std::string>& header = records[h].fields;
  std::map<std::string, size_t> col;
  for (size_t i = 0; i < header.size(); ++i) col.emplace(header[i], i);
  for (const char* m : {kDuration, kSm, kDram})
    PYLON_CHECK(col.count(m), source, ": no column ", m, " (ncu --csv --page raw --metrics ",
                ncu_roofline_metrics(), ")");
  size_t first = h + 1;
  std::vector<double> scale(header.size(), 1.0);
  if (first < records.size() && records[first].fields[0].empty()) {  // the units row
    const Record& units = records[first++];
    PYLON_CHECK(units.fields.size() == header.size(), source, ": line ", units.line, ": the units row has ",
                units.fields.size(), " fields, the header ", header.size());
    for (size_t i = 0; i < header.size(); ++i) scale[i] = unit_scale(units.fields[i]);
  }
  std::vector<size_t> tensor_cols;
  for (size_t i = 0; i < header.size(); ++i)
    if (header[i].rfind(kTensorPrefix, 0) == 0 && header[i].find("sparsity") == std::string::npos &&
        header[i].size() > 4 && header[i].compare(header[i].size() - 4, 4, ".sum") == 0)
      tensor_cols.push_back(i);

  std::vector<KernelCounters> kernels;
  std::map<std::string, size_t> index_of;
  const size_t name_col = col.at("Kernel Name");
  for (size_t r = first; r < records.size(); ++r) {
    const Record& rec = records[r];
    if (rec.fields[0].rfind("==", 0) == 0) continue;  // ncu's own messages
    PYLON_CHECK(rec.fields.size() == header.size(), source, ": line ", rec.line, ": ", rec.fields.size(),
                " fields, the header has ", header.size());
    // A value in base units; `required` values must be numbers, others may be absent ("n/a").
    auto value = [&](const char* metric, bool required) -> double {
      const auto it = col.find(metric);
      if (it == col.end()) return -1;
      double v = 0;
      const std::string& f = rec.fields[it->second];
      if (!parse_number(f, &v)) {
        PYLON_CHECK(!required, source, ": line ", rec.line, ": ", metric, " is '", f, "', not a number");
        return -1;
      }
      const double s = scale[it->second];
      PYLON_CHECK(!std::isnan(s), source, ": column ", metric, " has a unit this reader does not know");
      return v * s;
    };
    KernelCounters k;
    k.name = short_kernel_name(rec.fields[name_col]);
    PYLON_CHECK(!k.name.empty(), source, ": line ", rec.line, ": empty kernel name");
    k.launches = 1;
    k.seconds = value(kDuration, true);
    k.sm_pct = value(kSm, true);
    k.dram_pct = value(kDram, true);
    PYLON_CHECK(k.seconds >= 0 && k.sm_pct >= 0 && k.dram_pct >= 0, source, ": line ", rec.line,
                ": negative duration or throughput");
    k.memory_pct = value(kMemory, false);
    k.dram_bytes = value(kBytes, false);
    if (k.dram_bytes < 0) {
      const double rd = value(kBytesRead, false), wr = value(kBytesWrite, false);
      if (rd >= 0 && wr >= 0) k.dram_bytes = rd + wr;
    }
    const double fadd = value(kFadd, false), fmul = value(kFmul, false), ffma = value(kFfma, false);
    if (fadd >= 0 && fmul >= 0 && ffma >= 0) k.fp32_flop = fadd + fmul + 2 * ffma;
    for (size_t c : tensor_cols) {
      double v = 0;
      if (!parse_number(rec.fields[c], &v)) continue;
      k.tensor_flop = std::max(0.0, k.tensor_flop) + v * (std::isnan(scale[c]) ? 1.0 : scale[c]);
    }
    if (device_name && col.count("device__attribute_display_name") && device_name->empty())
      *device_name = rec.fields[col.at("device__attribute_display_name")];
    const auto [it, fresh] = index_of.try_emplace(k.name, kernels.size());
    if (fresh)
      kernels.push_back(k);
    else
      accumulate(kernels[it->second], k);
  }
  PYLON_CHECK(!kernels.empty(), source, ": no kernel rows after the header");
  return kernels;
}

std::vector<KernelCounters> read_ncu_csv(const std::string& path, std::string* device_name) {
  return parse_ncu_csv(read_text_file(path), path, device_name);
}

}  // namespace pylon::profile
