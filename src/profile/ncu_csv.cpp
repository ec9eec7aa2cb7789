// The ncu raw CSV reader: RFC 4180 fields (quoted, "" escapes, commas inside quotes), the units
// row turned into scale factors to base units (seconds, bytes, counts), thousands separators
// dropped from numbers.
#include "profile/ncu_csv.h"

#include <cxxabi.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <string_view>

#include "core/error.h"
#include "io/mapped_file.h"
#include "io/unicode_text.h"

namespace pylon::profile {
namespace {

constexpr const char* kDuration = "gpu__time_duration.sum";
constexpr const char* kSm = "sm__throughput.avg.pct_of_peak_sustained_elapsed";
constexpr const char* kDram = "dram__throughput.avg.pct_of_peak_sustained_elapsed";
constexpr const char* kGpuDram = "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed";  // the SOL section's name
constexpr const char* kMemory = "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed";
constexpr const char* kBytes = "dram__bytes.sum";
constexpr const char* kBytesRead = "dram__bytes_read.sum";
constexpr const char* kBytesWrite = "dram__bytes_write.sum";
constexpr const char* kFadd = "sm__sass_thread_inst_executed_op_fadd_pred_on.sum";
constexpr const char* kFmul = "sm__sass_thread_inst_executed_op_fmul_pred_on.sum";
constexpr const char* kFfma = "sm__sass_thread_inst_executed_op_ffma_pred_on.sum";
constexpr const char* kTensorPrefix = "sm__ops_path_tensor_src_";
// --set full's FP32 counters: per elapsed cycle of an SM sub-partition, summed over all of them.
constexpr const char* kFaddRate = "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum.per_cycle_elapsed";
constexpr const char* kFmulRate = "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum.per_cycle_elapsed";
constexpr const char* kFfmaRate = "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum.per_cycle_elapsed";
constexpr const char* kSmspCycles = "smsp__cycles_elapsed.avg";

// The --page details export: one row per (launch, section, metric), the speed-of-light section's
// figures by their display names.
constexpr const char* kSolSection = "GPU Speed Of Light Throughput";

// RFC 4180 records read one at a time (a 200,000-row export is never held as fields at once). The
// fields vector is reused from record to record, so its strings keep their capacity.
class CsvReader {
 public:
  CsvReader(std::string_view text, const std::string& source) : text_(text), source_(source) {}

  // The next record that holds anything (blank lines are skipped); false at the end.
  bool next(std::vector<std::string>& fields) {
    size_t n = 0;
    auto field = [&]() -> std::string& {
      if (n == fields.size()) fields.emplace_back();
      fields[n].clear();
      return fields[n++];
    };
    while (at_ < text_.size()) {
      record_line_ = line_;
      n = 0;
      bool any = false;  // a quote, a comma or a character other than '\r' seen
      std::string* f = &field();
      while (at_ < text_.size()) {
        const char c = text_[at_];
        if (c == '"') {
          any = true;
          const size_t open_line = line_;
          for (++at_;; ++at_) {  // a quoted run, "" for a quote
            const size_t q = text_.find('"', at_);
            PYLON_CHECK(q != std::string_view::npos, source_, ": line ", open_line,
                        ": a quoted field is never closed (truncated file?)");
            const std::string_view run = text_.substr(at_, q - at_);
            line_ += static_cast<size_t>(std::count(run.begin(), run.end(), '\n'));
            f->append(run);
            at_ = q + 1;
            if (at_ < text_.size() && text_[at_] == '"') {
              f->push_back('"');
              continue;
            }
            break;
          }
        } else if (c == ',') {
          any = true, ++at_;
          f = &field();
        } else if (c == '\n') {
          ++at_, ++line_;
          break;
        } else {  // an unquoted run up to the next special character
          const size_t stop = text_.find_first_of(",\"\n", at_);
          const std::string_view run = text_.substr(at_, (stop == std::string_view::npos ? text_.size() : stop) - at_);
          for (char r : run)
            if (r != '\r') f->push_back(r), any = true;
          at_ += run.size();
        }
      }
      if (any) {
        fields.resize(n);
        return true;
      }
    }
    return false;
  }
  size_t line() const { return record_line_; }  // 1-based line where the last record started

 private:
  std::string_view text_;
  const std::string& source_;
  size_t at_ = 0, line_ = 1, record_line_ = 1;
};

// Factor from a simple unit of ncu's (byte, Kbyte, Mbyte, ns, usecond, %, inst, ...) to the base
// unit; NaN for a unit it does not know.
double simple_unit_scale(std::string_view unit) {
  static const char* kBase[] = {"", "%", "byte", "second", "s", "inst", "cycle", "warp", "thread", "sector",
                                "request", "op", "flop", "block", "register"};
  for (const char* b : kBase)
    if (unit == b) return 1.0;
  if (unit.size() < 2) return NAN;
  static const std::map<char, double> kPrefix = {{'n', 1e-9}, {'u', 1e-6}, {'m', 1e-3}, {'K', 1e3},
                                                 {'M', 1e6},  {'G', 1e9},  {'T', 1e12}, {'P', 1e15}};
  const auto p = kPrefix.find(unit[0]);
  if (p == kPrefix.end()) return NAN;
  for (const char* b : kBase)
    if (*b && *b != '%' && unit.substr(1) == b) return p->second;
  return NAN;
}

// A simple unit or a ratio of two (byte/second); NaN for anything else. Constant stack and memory
// whatever the cell's length.
double unit_scale(std::string_view unit) {
  const size_t slash = unit.find('/');
  if (slash == std::string_view::npos) return simple_unit_scale(unit);
  const std::string_view per = unit.substr(slash + 1);
  if (per.find('/') != std::string_view::npos) return NAN;
  return simple_unit_scale(unit.substr(0, slash)) / simple_unit_scale(per);
}

// A cell ncu writes where it has no value.
bool is_absent(const std::string& s) { return s.empty() || s == "n/a" || s == "N/A"; }

// "1,234.5" -> 1234.5; false for text that is not a finite number.
bool parse_number(const std::string& cell, double* out) {
  std::string s;
  s.reserve(cell.size());
  for (char c : cell)
    if (c != ',' && c != ' ') s.push_back(c);
  if (s.empty()) return false;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size() || !std::isfinite(v)) return false;
  *out = v;
  return true;
}

// At most 200 bytes of a cell for an error line, its line breaks as spaces.
std::string excerpt(const std::string& cell) {
  std::string s = cell.substr(0, 200);
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return utf8_lossy(s) + (cell.size() > 200 ? "..." : "");
}

// The rest of a --page details export after its header (`rec` holds the header): per launch (ID),
// the speed-of-light section's Duration, Compute (SM) Throughput, DRAM Throughput and Memory
// Throughput. No FLOP or byte counts: the verdicts come from the percentages.
std::vector<KernelCounters> parse_details(CsvReader& reader, std::vector<std::string>& rec,
                                          const std::vector<std::string>& header,
                                          const std::map<std::string, size_t>& col, const std::string& source,
                                          std::string* device_name) {
  for (const char* c : {"Section Name", "Metric Unit"})
    PYLON_CHECK(col.count(c), source, ": a --page details export without the column \"", c, "\"");
  const size_t id_col = 0, name_col = col.at("Kernel Name"), section_col = col.at("Section Name"),
               metric_col = col.at("Metric Name"), unit_col = col.at("Metric Unit"),
               value_col = col.at("Metric Value");
  const size_t last_col = std::max({name_col, section_col, metric_col, unit_col, value_col});
  (void)device_name;  // the details page names the device by index only
  std::vector<KernelCounters> kernels;
  std::map<std::string, size_t> index_of;
  std::string id;  // the launch being read
  KernelCounters k;
  bool any = false;
  auto finish = [&]() {
    if (!any) return;
    PYLON_CHECK(k.seconds >= 0 && k.sm_pct >= 0 && k.dram_pct >= 0, source, ": launch ", excerpt(id), " (",
                excerpt(k.name), ") lacks the speed-of-light Duration, Compute (SM) Throughput or DRAM "
                "Throughput (export with ncu's default sections, --set full or --section SpeedOfLight)");
    const auto [it, fresh] = index_of.try_emplace(k.name, kernels.size());
    KernelCounters& sum = fresh ? kernels.emplace_back(k) : kernels[it->second];
    if (!fresh) accumulate(sum, k);
    PYLON_CHECK(std::isfinite(sum.seconds), source, ": the durations of kernel ", excerpt(sum.name),
                " overflow when summed");
  };
  while (reader.next(rec)) {
    if (rec[0].rfind("==", 0) == 0) continue;  // ncu's own messages
    const size_t line = reader.line();
    // ncu leaves out a row's trailing empty fields (the rule columns of plain metrics).
    PYLON_CHECK(rec.size() > last_col && rec.size() <= header.size(), source, ": line ", line, ": ", rec.size(),
                " fields, the header has ", header.size());
    if (!any || rec[id_col] != id) {
      finish();
      id = rec[id_col], any = true;
      k = KernelCounters{};
      k.name = utf8_lossy(short_kernel_name(rec[name_col]));
      PYLON_CHECK(!k.name.empty(), source, ": line ", line, ": empty kernel name");
      k.launches = 1, k.seconds = -1, k.sm_pct = -1, k.dram_pct = -1;
    }
    if (rec[section_col] != kSolSection) continue;
    const std::string& metric = rec[metric_col];
    double* into = metric == "Duration"                  ? &k.seconds
                   : metric == "Compute (SM) Throughput" ? &k.sm_pct
                   : metric == "DRAM Throughput"         ? &k.dram_pct
                   : metric == "Memory Throughput"       ? &k.memory_pct
                                                         : nullptr;
    if (!into) continue;
    double v = 0;
    PYLON_CHECK(parse_number(rec[value_col], &v) && v >= 0, source, ": line ", line, ": ", excerpt(metric), " is '",
                excerpt(rec[value_col]), "', not a number >= 0");
    const double scale = unit_scale(rec[unit_col]);
    PYLON_CHECK(!std::isnan(scale), source, ": line ", line, ": ", excerpt(metric), " has the unit '",
                excerpt(rec[unit_col]), "', which this reader does not know");
    PYLON_CHECK(std::isfinite(v * scale), source, ": line ", line, ": ", excerpt(metric), " is out of range");
    *into = v * scale;
  }
  finish();
  PYLON_CHECK(!kernels.empty(), source, ": no kernel rows after the header");
  return kernels;
}

}  // namespace

std::string missing_counters_note(const std::vector<KernelCounters>& kernels) {
  bool flop = false, bytes = false;
  for (const KernelCounters& k : kernels) {
    flop = flop || k.fp32_flop >= 0 || k.tensor_flop >= 0;
    bytes = bytes || k.dram_bytes >= 0;
  }
  if (flop && bytes) return "";
  std::string missing = !flop && !bytes ? "FLOP counters (sm__sass_thread_inst_executed_op_f*_pred_on, "
                                          "sm__ops_path_tensor_src_*) and DRAM bytes (dram__bytes)"
                        : !flop         ? "FLOP counters (sm__sass_thread_inst_executed_op_f*_pred_on, "
                                          "sm__ops_path_tensor_src_*)"
                                        : "DRAM bytes (dram__bytes)";
  return "this export has no " + missing +
         ": verdicts from the speed-of-light percentages, no roofline dots; ncu --set full --page raw, or "
         "--metrics " + ncu_roofline_metrics() + ", adds them";
}

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

std::vector<KernelCounters> parse_ncu_csv(std::string_view text, const std::string& source,
                                          std::string* device_name) {
  CsvReader reader(text, source);
  std::vector<std::string> rec;
  auto has = [&](const char* name) { return std::find(rec.begin(), rec.end(), name) != rec.end(); };
  bool found = false;  // the header: the first record that starts with "ID" and names the kernel
  while (!found && reader.next(rec)) found = rec[0] == "ID" && has("Kernel Name");
  PYLON_CHECK(found, source,
              ": not an Nsight Compute raw CSV (no header row with \"ID\" and \"Kernel Name\"; export with "
              "ncu --csv --page raw --metrics ...)");
  const std::vector<std::string> header = rec;
  std::map<std::string, size_t> col;
  for (size_t i = 0; i < header.size(); ++i) col.emplace(header[i], i);
  if (col.count("Metric Name") && col.count("Metric Value"))
    return parse_details(reader, rec, header, col, source, device_name);
  const char* dram = col.count(kDram) ? kDram : kGpuDram;
  for (const char* m : {kDuration, kSm, dram})
    PYLON_CHECK(col.count(m), source, ": no column ", m,
                " (export the speed-of-light figures: ncu's default sections, --set full, --section SpeedOfLight, "
                "or --metrics ", ncu_roofline_metrics(), ")");
  constexpr size_t kNone = SIZE_MAX;
  auto column = [&](const char* metric) { return col.count(metric) ? col.at(metric) : kNone; };
  std::vector<size_t> tensor_cols;
  for (size_t i = 0; i < header.size(); ++i)
    if (header[i].rfind(kTensorPrefix, 0) == 0 && header[i].find("sparsity") == std::string::npos &&
        header[i].size() > 4 && header[i].compare(header[i].size() - 4, 4, ".sum") == 0)
      tensor_cols.push_back(i);
  const size_t name_col = col.at("Kernel Name");
  const size_t device_col = column("device__attribute_display_name");

  std::vector<double> scale(header.size(), 1.0);
  bool have_row = reader.next(rec);
  if (have_row && rec[0].empty()) {  // the units row
    PYLON_CHECK(rec.size() == header.size(), source, ": line ", reader.line(), ": the units row has ", rec.size(),
                " fields, the header ", header.size());
    for (size_t i = 0; i < header.size(); ++i) scale[i] = unit_scale(rec[i]);
    have_row = reader.next(rec);
  }

  std::vector<KernelCounters> kernels;
  std::map<std::string, size_t> index_of;
  for (; have_row; have_row = reader.next(rec)) {
    if (rec[0].rfind("==", 0) == 0) continue;  // ncu's own messages
    const size_t line = reader.line();
    PYLON_CHECK(rec.size() == header.size(), source, ": line ", line, ": ", rec.size(), " fields, the header has ",
                header.size());
    // A count or share in base units: finite and >= 0. Absent ("n/a") is -1: an error when required.
    auto value = [&](size_t c, bool required) -> double {
      if (c == kNone) return -1;
      const std::string& f = rec[c];
      double v = 0;
      if (is_absent(f) && !required) return -1;
      PYLON_CHECK(parse_number(f, &v), source, ": line ", line, ": ", excerpt(header[c]), " is '", excerpt(f),
                  "', not a number");
      PYLON_CHECK(v >= 0, source, ": line ", line, ": ", excerpt(header[c]), " is ", excerpt(f),
                  ", a count or share is never negative");
      PYLON_CHECK(!std::isnan(scale[c]), source, ": column ", excerpt(header[c]),
                  " has a unit this reader does not know");
      PYLON_CHECK(std::isfinite(v * scale[c]), source, ": line ", line, ": ", excerpt(header[c]), " is ", excerpt(f),
                  ", out of range in base units");
      return v * scale[c];
    };
    KernelCounters k;
    k.name = utf8_lossy(short_kernel_name(rec[name_col]));
    PYLON_CHECK(!k.name.empty(), source, ": line ", line, ": empty kernel name");
    k.launches = 1;
    k.seconds = value(column(kDuration), true);
    k.sm_pct = value(column(kSm), true);
    k.dram_pct = value(column(dram), true);
    k.memory_pct = value(column(kMemory), false);
    k.dram_bytes = value(column(kBytes), false);
    if (k.dram_bytes < 0) {
      const double rd = value(column(kBytesRead), false), wr = value(column(kBytesWrite), false);
      if (rd >= 0 && wr >= 0) k.dram_bytes = rd + wr;
    }
    const double fadd = value(column(kFadd), false), fmul = value(column(kFmul), false),
                 ffma = value(column(kFfma), false);
    if (fadd >= 0 && fmul >= 0 && ffma >= 0) {
      k.fp32_flop = fadd + fmul + 2 * ffma;
    } else {  // --set full: rates per elapsed cycle times the cycles
      const double add = value(column(kFaddRate), false), mul = value(column(kFmulRate), false),
                   fma = value(column(kFfmaRate), false), cycles = value(column(kSmspCycles), false);
      if (add >= 0 && mul >= 0 && fma >= 0 && cycles >= 0) k.fp32_flop = (add + mul + 2 * fma) * cycles;
    }
    for (size_t c : tensor_cols) {
      const double v = value(c, false);
      if (v >= 0) k.tensor_flop = std::max(0.0, k.tensor_flop) + v;
    }
    if (device_name && device_col != kNone && device_name->empty()) *device_name = utf8_lossy(rec[device_col]);
    const auto [it, fresh] = index_of.try_emplace(k.name, kernels.size());
    KernelCounters& sum = fresh ? kernels.emplace_back(k) : kernels[it->second];
    if (!fresh) accumulate(sum, k);
    for (double x : {sum.seconds, sum.dram_bytes, sum.fp32_flop, sum.tensor_flop})
      PYLON_CHECK(std::isfinite(x), source, ": line ", line, ": the counts of kernel ", excerpt(sum.name),
                  " overflow when summed");
  }
  PYLON_CHECK(!kernels.empty(), source, ": no kernel rows after the header");
  return kernels;
}

std::vector<KernelCounters> read_ncu_csv(const std::string& path, std::string* device_name) {
  const MappedFile file(path);  // a regular file, or one line saying what it is not
  return parse_ncu_csv(std::string_view(reinterpret_cast<const char*>(file.data()), file.size()), path, device_name);
}

}  // namespace pylon::profile
