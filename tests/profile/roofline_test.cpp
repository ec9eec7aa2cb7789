// The roofline from Nsight Compute CSV exports: parsing (quotes, units, thousands separators,
// ncu's own lines), per-kernel sums, verdicts, the outputs, and corrupted exports as one error.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <map>
#include <random>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "profile/ncu_csv.h"
#include "profile/roofline.h"
#include "support/run_command.h"
#include "support/temp_dir.h"

namespace pylon::profile {
namespace {

// Three kernels (adamw launched twice) as ncu 2025 writes them, with its "==PROF==" lines.
const std::string kCsv =
    "==PROF== Connected to process 4242 (/tmp/b/src/pylon)\n"
    "\"ID\",\"Process ID\",\"Process Name\",\"Host Name\",\"Kernel Name\",\"Context\",\"Stream\",\"Block Size\","
    "\"Grid Size\",\"Device\",\"CC\",\"device__attribute_display_name\",\"dram__bytes.sum\","
    "\"dram__throughput.avg.pct_of_peak_sustained_elapsed\",\"gpu__time_duration.sum\","
    "\"sm__ops_path_tensor_src_bf16_dst_fp32.sum\",\"sm__sass_thread_inst_executed_op_fadd_pred_on.sum\","
    "\"sm__sass_thread_inst_executed_op_ffma_pred_on.sum\",\"sm__sass_thread_inst_executed_op_fmul_pred_on.sum\","
    "\"sm__throughput.avg.pct_of_peak_sustained_elapsed\"\n"
    "\"\",\"\",\"\",\"\",\"\",\"\",\"\",\"\",\"\",\"\",\"\",\"\",\"Mbyte\",\"%\",\"usecond\",\"\",\"inst\",\"inst\",\"inst\",\"%\"\n"
    "\"0\",\"4242\",\"pylon\",\"127.0.0.1\",\"void pylon::cuda::(anonymous namespace)::adamw_kernel(float *, float *, "
    "float *)\",\"1\",\"7\",\"(256, 1, 1)\",\"(1024, 1, 1)\",\"0\",\"9.0\",\"NVIDIA H200\",\"1,200.50\",\"85.30\","
    "\"300.00\",\"0\",\"1,000\",\"2,000\",\"500\",\"20.10\"\n"
    "\"1\",\"4242\",\"pylon\",\"127.0.0.1\",\"nvjet_tst_128x256_64x4_1x2_h_bz_coopA_TNT\",\"1\",\"7\",\"(384, 1, 1)\","
    "\"(132, 1, 1)\",\"0\",\"9.0\",\"NVIDIA H200\",\"50.00\",\"20.00\",\"100.00\",\"70,000,000,000\",\"0\",\"0\",\"0\","
    "\"88.00\"\n"
    "\"2\",\"4242\",\"pylon\",\"127.0.0.1\",\"void pylon::cuda::add_scalar_kernel(float *, const float *)\",\"1\","
    "\"7\",\"(1, 1, 1)\",\"(1, 1, 1)\",\"0\",\"9.0\",\"NVIDIA H200\",\"0.00\",\"0.50\",\"2.00\",\"n/a\",\"1\",\"0\","
    "\"0\",\"0.10\"\n"
    "\"3\",\"4242\",\"pylon\",\"127.0.0.1\",\"void pylon::cuda::(anonymous namespace)::adamw_kernel(float *, float *, "
    "float *)\",\"1\",\"7\",\"(256, 1, 1)\",\"(1024, 1, 1)\",\"0\",\"9.0\",\"NVIDIA H200\",\"1,199.50\",\"75.30\","
    "\"100.00\",\"0\",\"1,000\",\"2,000\",\"500\",\"20.10\"\n"
    "==PROF== Disconnected from process 4242\n";

void fuzz(const std::string& csv);

const KernelCounters* find(const std::vector<KernelCounters>& ks, const std::string& name) {
  for (const KernelCounters& k : ks)
    if (k.name == name) return &k;
  return nullptr;
}

TEST(NcuCsv, ParsesKernelsSummingLaunchesInBaseUnits) {
  std::string device;
  const auto ks = parse_ncu_csv(kCsv, "sample", &device);
  EXPECT_EQ(device, "NVIDIA H200");
  ASSERT_EQ(ks.size(), 3u);
  EXPECT_EQ(ks[0].name, "pylon::cuda::adamw_kernel");  // first launch first
  const KernelCounters& adamw = ks[0];
  EXPECT_EQ(adamw.launches, 2);
  EXPECT_DOUBLE_EQ(adamw.seconds, 400e-6);
  EXPECT_DOUBLE_EQ(adamw.dram_bytes, 2400e6);
  EXPECT_DOUBLE_EQ(adamw.dram_pct, (85.3 * 300 + 75.3 * 100) / 400);  // weighted by duration
  EXPECT_DOUBLE_EQ(adamw.fp32_flop, 2 * (1000 + 500 + 2 * 2000.0));
  EXPECT_DOUBLE_EQ(adamw.tensor_flop, 0);
  EXPECT_LT(adamw.memory_pct, 0);  // not exported
  const KernelCounters* gemm = find(ks, "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_TNT");
  ASSERT_TRUE(gemm);
  EXPECT_DOUBLE_EQ(gemm->tensor_flop, 7e10);
  const KernelCounters* tiny = find(ks, "pylon::cuda::add_scalar_kernel");
  ASSERT_TRUE(tiny);
  EXPECT_LT(tiny->tensor_flop, 0);  // "n/a"
}

TEST(NcuCsv, VerdictsFollowSpeedOfLight) {
  const auto v = judge_all(parse_ncu_csv(kCsv, "sample"), datasheet_ceilings("NVIDIA H200"));
  ASSERT_EQ(v.size(), 3u);
  EXPECT_EQ(v[0].k.name, "pylon::cuda::adamw_kernel");  // longest first
  EXPECT_EQ(v[0].bound, Bound::memory);
  EXPECT_NEAR(v[0].dram_bytes_per_s, 2400e6 / 400e-6, 1);
  EXPECT_EQ(v[1].bound, Bound::compute);
  EXPECT_NEAR(v[1].flops_per_s, 700e12, 1e6);
  EXPECT_NEAR(v[1].intensity, 7e10 / 50e6, 1e-6);
  EXPECT_EQ(v[2].bound, Bound::latency);
  for (const auto& x : v) EXPECT_FALSE(x.fix.empty());
}

TEST(NcuCsv, RooflineRidgeDecidesWhenBothUnitsAreBusy) {
  KernelCounters gemm;  // the LM head GEMM as ncu measured it on the H200 (below)
  gemm.name = "gemm", gemm.launches = 1, gemm.seconds = 1.366e-3, gemm.sm_pct = 90.5, gemm.dram_pct = 19.3;
  gemm.memory_pct = 93.1, gemm.dram_bytes = 1.27e9, gemm.tensor_flop = 1.07e12, gemm.fp32_flop = 0;
  EXPECT_EQ(judge(gemm, datasheet_ceilings("NVIDIA H200")).bound, Bound::compute);  // 845 FLOP/B > 206
  EXPECT_EQ(judge(gemm, DeviceCeilings{}).bound, Bound::memory);  // no ceilings: the busier unit (L1)
  gemm.sm_pct = 40, gemm.memory_pct = 50, gemm.dram_pct = 19.3;
  EXPECT_EQ(judge(gemm, datasheet_ceilings("NVIDIA H200")).bound, Bound::latency);
}

// A real export: the first 24 kernels of one MiniLLM training step (seed preset, D=2048, batch
// 8x1024) under ncu 2025.3 on an H200 (bench/profile_device.sh), every column ncu wrote.
const std::string kH200Sample = std::string(PYLON_GOLDEN_DIR) + "/../profile/data/ncu_h200_minillm_step.csv";

TEST(NcuCsv, RealH200ExportParsesWithItsUnitsAndCounts) {
  std::string device;
  const auto ks = read_ncu_csv(kH200Sample, &device);
  EXPECT_EQ(device, "NVIDIA H200");
  ASSERT_EQ(ks.size(), 13u);  // 24 launches of 13 kernels
  int64_t launches = 0;
  for (const auto& k : ks) launches += k.launches;
  EXPECT_EQ(launches, 24);
  const KernelCounters* cast = find(ks, "pylon::cast_f32_to_bf16_kernel<8>");
  ASSERT_TRUE(cast);
  EXPECT_DOUBLE_EQ(cast->seconds, 313824e-9);  // "ns", thousands separators
  EXPECT_DOUBLE_EQ(cast->dram_bytes, 1374162688);
  // Tensor-core FLOPs are 2·M·N·K exactly: the QKV (8192x2048 by 2048x6144) and output (x2048)
  // projections of both layers share this cuBLASLt kernel.
  const KernelCounters* proj = find(ks, "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_bias_TNT");
  ASSERT_TRUE(proj);
  EXPECT_EQ(proj->launches, 4);
  EXPECT_DOUBLE_EQ(proj->tensor_flop, 2 * (2.0 * 8192 * 2048 * 6144 + 2.0 * 8192 * 2048 * 2048));
  const auto v = judge_all(ks, datasheet_ceilings(device));
  std::map<std::string, Bound> bound;
  for (const auto& x : v) bound[x.k.name] = x.bound;
  EXPECT_EQ(bound["nvjet_sm90_tst_320x128_64x3_1x2_h_bz_coopB_TNT"], Bound::compute);  // FFN-up and head GEMMs
  EXPECT_EQ(bound["pylon::cast_f32_to_bf16_kernel<8>"], Bound::memory);
  EXPECT_EQ(bound["pylon::cross_entropy_kernel<8, 1>"], Bound::memory);
  EXPECT_EQ(bound["pylon::add_scalar_kernel"], Bound::latency);
  EXPECT_EQ(bound["pylon::flash_attention_forward_wgmma<128, 1, 64>"], Bound::latency);  // SM 43%, memory 44%
}

TEST(NcuCsv, RealExportSurvivesTruncationAndMutation) {
  std::ifstream in(kH200Sample, std::ios::binary);
  fuzz(std::string(std::istreambuf_iterator<char>(in), {}));
}

TEST(NcuCsv, ShortKernelNames) {
  EXPECT_EQ(short_kernel_name("void f<128, true>(float *, int)"), "f<128, true>");
  EXPECT_EQ(short_kernel_name("void a::(anonymous namespace)::k(void (*)(int), float)"), "a::k");
  EXPECT_EQ(short_kernel_name("void pylon::<unnamed>::silu_forward_kernel<8>(__nv_bfloat16 *, long)"),
            "pylon::silu_forward_kernel<8>");
  EXPECT_EQ(short_kernel_name("nvjet_tst_64x8"), "nvjet_tst_64x8");
  // CUPTI's symbols: mangled names demangle, others pass through.
  EXPECT_EQ(kernel_name_from_symbol("_ZN5pylon4cuda12_GLOBAL__N_112adamw_kernelILi4EEEvPfS3_S3_PKfP13__nv_bfloat16"),
            "pylon::cuda::adamw_kernel<4>");
  EXPECT_EQ(kernel_name_from_symbol("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT"),
            "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT");
  EXPECT_EQ(short_kernel_name("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096>)"),
            "ncclDevKernel_AllGather_RING_LL");
}

TEST(NcuCsv, UnitsAreScaled) {
  const std::string csv =
      "\"ID\",\"Kernel Name\",\"gpu__time_duration.sum\",\"sm__throughput.avg.pct_of_peak_sustained_elapsed\","
      "\"dram__throughput.avg.pct_of_peak_sustained_elapsed\",\"dram__bytes.sum\"\r\n"
      "\"\",\"\",\"msecond\",\"%\",\"%\",\"Kbyte\"\r\n"
      "\"0\",\"k\",\"1.5\",\"10\",\"70\",\"2\"\r\n";
  const auto ks = parse_ncu_csv(csv, "crlf");
  ASSERT_EQ(ks.size(), 1u);
  EXPECT_DOUBLE_EQ(ks[0].seconds, 1.5e-3);
  EXPECT_DOUBLE_EQ(ks[0].dram_bytes, 2e3);
  EXPECT_LT(ks[0].fp32_flop, 0);
}

// One line naming the source, never a crash.
std::string error_of(const std::string& text) {
  try {
    parse_ncu_csv(text, "bad.csv");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string replace_first(std::string s, const std::string& from, const std::string& to) {
  const size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return s.replace(at, from.size(), to);
}

TEST(NcuCsv, BrokenExportsAreOneClearError) {
  EXPECT_NE(error_of("").find("not an Nsight Compute raw CSV"), std::string::npos);
  EXPECT_NE(error_of("name,value\nx,1\n").find("not an Nsight Compute raw CSV"), std::string::npos);
  EXPECT_NE(error_of(replace_first(kCsv, "sm__throughput.avg", "sm__other.avg")).find("no column sm__throughput"),
            std::string::npos);
  EXPECT_NE(error_of(replace_first(kCsv, "\"300.00\"", "\"fast\"")).find("line 4: gpu__time_duration.sum is 'fast'"),
            std::string::npos) << error_of(replace_first(kCsv, "\"300.00\"", "\"fast\""));
  EXPECT_NE(error_of(replace_first(kCsv, "\"85.30\"", "\"n/a\"")).find("not a number"), std::string::npos);
  EXPECT_NE(error_of(replace_first(kCsv, ",\"20.10\"\n", "\n")).find("fields, the header has"), std::string::npos);
  EXPECT_NE(error_of(kCsv.substr(0, kCsv.find("NVIDIA H200") + 4)).find("never closed"), std::string::npos);
  EXPECT_NE(error_of(replace_first(kCsv, "\"Mbyte\"", "\"Qbyte\"")).find("unit"), std::string::npos);
  EXPECT_NE(error_of(kCsv.substr(0, kCsv.find("\"0\",\"4242\""))).find("no kernel rows"), std::string::npos);
}

// Every truncation and random byte flips: parsed or one pylon::Error, nothing else.
void fuzz(const std::string& csv) {
  for (size_t n = 0; n < csv.size(); n += 1 + n / 64) {
    try {
      parse_ncu_csv(csv.substr(0, n), "cut");
    } catch (const Error&) {
    }
  }
  std::mt19937 rng(7);
  const char alphabet[] = "\",\n\r0123456789.%a-=";
  for (int trial = 0; trial < 300; ++trial) {
    std::string s = csv;
    for (int k = 0; k < 4; ++k) s[rng() % s.size()] = alphabet[rng() % (sizeof alphabet - 1)];
    try {
      const auto ks = parse_ncu_csv(s, "mutated");
      for (const auto& v : judge_all(ks, datasheet_ceilings("NVIDIA H200"))) EXPECT_FALSE(v.fix.empty());
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    }
  }
}

TEST(NcuCsv, SurvivesTruncationAndMutation) { fuzz(kCsv); }

TEST(NcuCsv, RooflineCommandWritesTableJsonAndSvg) {
  pylon::testing::TempDir tmp;
  std::ofstream(tmp.file("k.csv")) << kCsv;
  const auto r = pylon::testing::run_pylon("roofline --ncu-csv " + tmp.file("k.csv") + " --json " +
                                           tmp.file("r.json") + " --svg " + tmp.file("r.svg"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("memory-bound"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("NVIDIA H200"), std::string::npos) << r.out;
  std::ifstream j(tmp.file("r.json"));
  const auto doc = nlohmann::json::parse(j);
  EXPECT_EQ(doc["kernels"].size(), 3u);
  EXPECT_EQ(doc["ceilings"]["dram_bytes_per_s"], 4.8e12);
  EXPECT_EQ(doc["kernels"][1]["verdict"], "compute-bound");
  std::ifstream svg_in(tmp.file("r.svg"));
  const std::string svg(std::istreambuf_iterator<char>(svg_in), {});
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_EQ(std::count(svg.begin(), svg.end(), '<') - std::count(svg.begin(), svg.end(), '>'), 0);
  EXPECT_NE(svg.find("<circle"), std::string::npos);
  EXPECT_NE(svg.find("bf16 tensor 989.4 TFLOP/s"), std::string::npos);
}

TEST(NcuCsv, RooflineCommandErrorsAreOneLine) {
  pylon::testing::TempDir tmp;
  std::ofstream(tmp.file("bad.csv")) << "hello\n";
  for (const std::string& args : {std::string("roofline"), "roofline --ncu-csv " + tmp.file("missing.csv"),
                                  "roofline --ncu-csv " + tmp.file("bad.csv"), std::string("roofline --top 0 --ncu-csv x")}) {
    const auto r = pylon::testing::run_pylon(args);
    EXPECT_EQ(r.exit_code, 1) << args << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}

}  // namespace
}  // namespace pylon::profile

namespace pylon::profile {
namespace {

// The units row with one cell replaced (the dram__bytes.sum column's "Mbyte").
std::string with_bytes_unit(const std::string& unit) { return replace_first(kCsv, "\"Mbyte\"", "\"" + unit + "\""); }

// A units cell of a million characters parsed in constant stack and linear memory (a recursion per
// '/' overflowed the stack at 100,000, and each level copied the rest of the cell).
TEST(NcuCsv, LongUnitCellsAreRefusedInConstantStack) {
  for (const std::string& unit : {std::string(100000, '/'), [] {
         std::string s;
         for (int i = 0; i < 500000; ++i) s += "M/";
         return s;
       }()}) {
    const std::string e = error_of(with_bytes_unit(unit));
    EXPECT_NE(e.find("column dram__bytes.sum has a unit this reader does not know"), std::string::npos) << e.substr(0, 300);
    EXPECT_EQ(e.find('\n'), std::string::npos);
  }
  EXPECT_NE(error_of(with_bytes_unit("byte/second/second")).find("unit"), std::string::npos);
  EXPECT_DOUBLE_EQ(find(parse_ncu_csv(with_bytes_unit("Kbyte/usecond"), "x"), "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_TNT")
                       ->dram_bytes, 50.0 * 1e3 / 1e-6);
}

// 200,000 launches stream through one record at a time (the whole export used to be split into
// fields first: 13.4 s and 3.2 GB for 200,000 rows of a real 305-column export); line numbers
// still count the line breaks inside quoted fields.
TEST(NcuCsv, ManyRowsStreamWithTheirLineNumbers) {
  const size_t first = kCsv.find("\"0\",\"4242\""), end = kCsv.find("==PROF== Disconnected");
  const std::string rows = kCsv.substr(first, end - first);  // 4 launches
  std::string csv = kCsv.substr(0, first);
  for (int i = 0; i < 50000; ++i) csv += rows;
  const auto ks = parse_ncu_csv(csv, "big");
  ASSERT_EQ(ks.size(), 3u);
  int64_t launches = 0;
  for (const auto& k : ks) launches += k.launches;
  EXPECT_EQ(launches, 200000);
  EXPECT_NEAR(find(ks, "pylon::cuda::adamw_kernel")->seconds, 50000 * 400e-6, 1e-9);
  // A quoted kernel name on lines 6 and 7: the next row starts on line 8.
  std::string two_line = replace_first(kCsv, "void pylon::cuda::add_scalar_kernel", "void pylon::cuda::\nadd_scalar_kernel");
  two_line = replace_first(two_line, "\"1,199.50\"", "\"-1\"");
  EXPECT_NE(error_of(two_line).find("line 8: dram__bytes.sum is -1, a count or share is never negative"),
            std::string::npos) << error_of(two_line);
}

// Counts and shares are finite numbers >= 0 (a negative optional count used to read as "not
// measured", text as "n/a", and an overflow to infinity made the chart's decade loop endless).
TEST(NcuCsv, FiguresMustBeFiniteAndNonNegative) {
  EXPECT_NE(error_of(replace_first(kCsv, "\"1,200.50\"", "\"-5\"")).find("line 4: dram__bytes.sum is -5, a count or share is never negative"),
            std::string::npos) << error_of(replace_first(kCsv, "\"1,200.50\"", "\"-5\""));
  EXPECT_NE(error_of(replace_first(kCsv, "\"300.00\"", "\"-300\"")).find("line 4: gpu__time_duration.sum is -300"),
            std::string::npos);
  EXPECT_NE(error_of(replace_first(kCsv, "\"1,000\"", "\"nan\"")).find(
                "line 4: sm__sass_thread_inst_executed_op_fadd_pred_on.sum is 'nan', not a number"),
            std::string::npos);
  EXPECT_NE(error_of(replace_first(kCsv, "\"70,000,000,000\"", "\"lots\"")).find("is 'lots', not a number"),
            std::string::npos);
  EXPECT_NE(error_of(replace_first(kCsv, "\"1,200.50\"", "\"1e308\"")).find("dram__bytes.sum is 1e308, out of range"),
            std::string::npos);  // 1e308 Mbyte
  EXPECT_NE(error_of(replace_first(replace_first(kCsv, "\"2,000\"", "\"1e308\""), "\"1,000\"", "\"1e308\""))
                .find("the counts of kernel pylon::cuda::adamw_kernel overflow"),
            std::string::npos);
  // "n/a" and empty cells are "not measured" for the optional counters.
  const auto ks = parse_ncu_csv(replace_first(kCsv, "\"1,200.50\"", "\"\""), "x");
  EXPECT_LT(find(ks, "pylon::cuda::adamw_kernel")->dram_bytes, 0);
}

// A kernel name that is not UTF-8 (a binary's symbol) gets U+FFFD: the JSON used to fail to dump
// (nlohmann's type_error, exit 3) and leave a 0-byte --json file.
TEST(NcuCsv, InvalidUtf8KernelNamesAreReplaced) {
  pylon::testing::TempDir tmp;
  std::ofstream(tmp.file("k.csv")) << replace_first(kCsv, "nvjet_tst_128x256", "nvjet\xff\xfe_tst_128x256");
  const auto r = pylon::testing::run_pylon("roofline --ncu-csv " + tmp.file("k.csv") + " --json " + tmp.file("r.json") +
                                           " --svg " + tmp.file("r.svg"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::ifstream j(tmp.file("r.json"));
  const auto doc = nlohmann::json::parse(j);
  EXPECT_EQ(doc["kernels"][1]["name"], "nvjet\xef\xbf\xbd\xef\xbf\xbd_tst_128x256_64x4_1x2_h_bz_coopA_TNT");
}

// Ceilings that overflow to infinity made `--svg` loop with growing memory; now one line, and no
// --json or --svg file is left.
TEST(NcuCsv, InfiniteCeilingsAreOneLineAndNoOutput) {
  pylon::testing::TempDir tmp;
  std::ofstream(tmp.file("k.csv")) << kCsv;
  for (const char* flag : {"--peak-tflops 1e300", "--peak-gbs 1e300", "--peak-fp32-tflops 1e299"}) {
    const auto r = pylon::testing::run_pylon("roofline --ncu-csv " + tmp.file("k.csv") + " " + flag + " --json " +
                                                 tmp.file("r.json") + " --svg " + tmp.file("r.svg"),
                                             "", 60);
    pylon::testing::expect_clear_error(r, "must be finite");
    EXPECT_FALSE(std::ifstream(tmp.file("r.json"))) << flag;
    EXPECT_FALSE(std::ifstream(tmp.file("r.svg"))) << flag;
  }
}

}  // namespace
}  // namespace pylon::profile
