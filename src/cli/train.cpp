// pylon train: flags -> TrainOptions -> train() on this rank's communicator, or, with
// --nproc-per-node / --nnodes, the launcher that starts the ranks. Without --data it trains on the
// default English text (Debian's fortunes), tokenized on first use.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <cstdlib>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/env.h"
#include "core/error.h"
#include "model/weights.h"
#include "io/safetensors.h"
#include "core/timer.h"
#include "dist/gloo_communicator.h"
#include "dist/launcher.h"
#ifdef PYLON_HAVE_CUDA
#include "ops/cuda/runtime.h"
#include "train/cuda/trainer_cuda.h"
#endif
#include "dist/rendezvous.h"
#include "io/default_data.h"
#include "io/tokenizer.h"
#include "profile/counter_profile.h"
#include "profile/device_trace.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

namespace pylon {

int run_train(int argc, char** argv) {
  TrainOptions o;
  std::string preset = "causal", schedule = "cosine", device = "cpu", dtype = "fp32", recompute = "selective";
  std::string reduce_dtype = "fp32";
  int vocab = 32000, dim = 256, layers = 4, heads = 4, nproc = 1, nnodes = 1, node_rank = 0;
  int kv_heads = 0, head_dim = 0, ffn_dim = 0;
  float norm_eps = 0, rope_theta = 10000.0f;
  bool qkv_bias = false, attention_bias = false, tie_embeddings = false;
  int master_port = 0;
  std::string master_addr;
  double dist_timeout = 300;
  bool no_reshard = false, no_prefetch = false, whole_root = false;
  int64_t warmup = 0;
  int64_t seed = 0;
  o.batch = 16, o.seq = 128, o.steps = 300, o.adamw.lr = 1e-3f, o.adamw.weight_decay = 0.1f;
  o.eval_every = 50;
  warmup = o.schedule.warmup;

  ArgParser args("train", "Train MiniLLM. Defaults: the causal preset at a small size on the default "
                          "English text,\nsized for a few minutes on 2 CPU cores.");
  args.add_choice("preset", &preset, preset_names(), "model preset");
  args.add("vocab", &vocab, Range::at_least(1), "vocabulary size (default data: its tokenizer's)");
  args.add("dim", &dim, Range::at_least(1), "model width D");
  args.add("layers", &layers, Range::at_least(1), "transformer blocks L");
  args.add("heads", &heads, Range::at_least(1), "attention heads H (D divisible by H)");
  args.add("kv-heads", &kv_heads, Range::at_least(0), "llama: key/value heads (grouped-query attention; divides H; 0 = H)");
  args.add("head-dim", &head_dim, Range::at_least(0), "llama: head size (0 = D / H)");
  args.add("ffn-dim", &ffn_dim, Range::at_least(0), "llama: the MLP's hidden width (0 = 4 D)");
  args.add("norm-eps", &norm_eps, Range::at_least(0), "RMSNorm eps (0 = the preset's: 1e-5 for llama, fp32 eps for seed and causal)");
  args.add("rope-theta", &rope_theta, Range::above(0), "rotary embeddings' theta");
  args.add_switch("qkv-bias", &qkv_bias, "llama: biases on q, k and v (as Qwen2)");
  args.add_switch("attention-bias", &attention_bias, "llama: biases on q, k, v and o (Llama's attention_bias)");
  args.add_switch("tie-embeddings", &tie_embeddings, "llama: the head is the embedding table");
  args.add("batch", &o.batch, Range::at_least(1), "rows per rank per micro-step B");
  args.add("seq", &o.seq, Range::at_least(1), "tokens per row T");
  args.add("steps", &o.steps, Range::at_least(1), "optimizer steps");
  args.add("grad-accum", &o.grad_accum, Range::at_least(1), "micro-steps per optimizer step");
  args.add("lr", &o.adamw.lr, Range::above(0), "peak learning rate");
  args.add("weight-decay", &o.adamw.weight_decay, Range::at_least(0), "AdamW weight decay");
  args.add("beta1", &o.adamw.beta1, Range::half_open(0, 1), "AdamW beta1");
  args.add("beta2", &o.adamw.beta2, Range::half_open(0, 1), "AdamW beta2");
  args.add("adam-eps", &o.adamw.eps, Range::above(0), "AdamW eps");
  args.add("grad-clip", &o.grad_clip, Range::at_least(0), "global gradient-norm clip (0 = off)");
  args.add_choice("lr-schedule", &schedule, {"constant", "cosine"}, "learning-rate schedule");
  args.add("warmup", &warmup, Range::at_least(0), "linear warmup steps");
  args.add("min-lr-frac", &o.schedule.min_lr_frac, Range::closed(0, 1), "cosine floor as a fraction of --lr");
  args.add("seed", &seed, Range::at_least(0), "initialisation seed");
  args.add("data", &o.data, "token file (.bin uint16, .u32 or llm.c header); default: English text");
  args.add("val-data", &o.val_data, "token file for validation loss");
  args.add("eval-every", &o.eval_every, Range::at_least(0), "validation every K steps (0 = off)");
  args.add("eval-steps", &o.eval_steps, Range::at_least(1), "micro-batches per validation");
  args.add("tokenizer", &o.tokenizer,
           "tokenizer stored with checkpoints: SentencePiece .model, tokenizer.json or a folder with either "
           "(default: the data's, or the --init-from folder's)");
  args.add("init-from", &o.init_from,
           "initial weights: a .safetensors file of this model, or a folder (Hugging Face's config.json and "
           "model.safetensors, sharded or not; a Pylon step folder) whose config sets the model");
  args.add_choice("device", &device, {"cpu", "cuda"}, "compute device");
  args.add_choice("dtype", &dtype, {"fp32", "bf16"},
                  "compute dtype (cpu: fp32; cuda: bf16, the default there, or fp32 throughout to compare with the CPU)");
  args.add_choice("recompute", &recompute, {"none", "selective", "full"},
                  "cuda: activations backward recomputes (selective: norms and SiLU; full: whole blocks)");
  args.add("nproc-per-node", &nproc, Range::closed(1, 1024), "ranks to start on this machine (like torchrun)");
  args.add("nnodes", &nnodes, Range::closed(1, 65536), "machines in the job");
  args.add("node-rank", &node_rank, Range::at_least(0), "this machine's index in 0..nnodes-1");
  args.add("master-addr", &master_addr, "rank 0's host (default: $MASTER_ADDR, else 127.0.0.1 on one node)");
  args.add("master-port", &master_port, Range::closed(0, 65535), "rendezvous port on rank 0's host (0: $MASTER_PORT, else a free one on one node)");
  args.add("dist-timeout", &dist_timeout, Range::closed(0.001, 1e6),
           "seconds a collective may wait for its peers (counted in whole milliseconds)");
  args.add_switch("no-reshard", &no_reshard, "keep units gathered from forward to backward (ZeRO-2)");
  args.add_switch("no-prefetch", &no_prefetch,
                  "run FSDP's collectives on the compute thread, each when its unit needs it");
  args.add_switch("no-sync", &o.no_sync, "accumulate gradients over micro-steps, reduce once per step");
  args.add_choice("reduce-dtype", &reduce_dtype, {"fp32", "bf16"},
                  "cuda: dtype of the gradient reduce-scatter (bf16: half the bytes, bf16 rounding)");
  args.add_switch("whole-root", &whole_root,
                  "cuda: reduce the root's embedding and head gradients together at the end of backward (by "
                  "default the head's is reduced, and its next weights gathered, as its backward ends)");
  args.add_switch("one-gpu-reshard", &o.one_gpu_reshard,
                  "cuda, one GPU: cast each block's bf16 weights from the fp32 master before its forward and "
                  "again before its backward, as several GPUs gather them, instead of keeping a bf16 copy of the "
                  "whole model (less memory, a little slower)");
  args.add_switch("cuda-graph", &o.cuda_graph,
                  "cuda: capture the second and third steps as CUDA graphs and replay them for every later "
                  "step (one launch a step; collective timings are then not measured)");
  args.add_switch("check-reshard", &o.check_reshard,
                  "debug: fill freed parameter slots with NaN (a read of a resharded unit shows)");
  args.add("save", &o.save_dir, "checkpoint directory (written at the end)");
  args.add("save-every", &o.save_every, Range::at_least(0), "also checkpoint every K steps");
  args.add("resume", &o.resume_dir, "continue from a checkpoint directory");
  args.add("metrics", &o.metrics_path, "JSONL file, one object per optimizer step");
  args.add("log-every", &o.log_every, Range::at_least(0), "progress line every K steps");
  args.add("profile", &o.profile.dir,
           "write DIR/trace.rank<R>.json per rank (CPU ranges; CUDA kernels and copies via CUPTI), "
           "DIR/ops.csv, DIR/analysis.json, and print the top ops and the step breakdown");
  args.add("profile-wait", &o.profile.schedule.wait, Range::at_least(0), "profiler schedule: steps not recorded first");
  args.add("profile-warmup", &o.profile.schedule.warmup, Range::at_least(0), "profiler schedule: then steps recorded and dropped");
  args.add("profile-active", &o.profile.schedule.active, Range::at_least(1), "profiler schedule: then steps recorded");
  args.add_switch("profile-roofline", &o.profile.counters,
                  "with --profile on CUDA: instead of tracing, hardware counters of the first active step's "
                  "kernels (CUPTI range profiler, kernel replay) -> DIR/roofline.json, DIR/roofline.svg and verdicts");
  if (!args.parse(argc, argv)) {
    std::fputs(args.help().c_str(), stdout);
    return 0;
  }
  if (!args.given("dtype") && device == "cuda") dtype = "bf16";
  PYLON_CHECK(device == "cuda" || dtype == "fp32", "--dtype bf16 needs --device cuda; the CPU path computes in fp32");
  o.device = device;
  o.dtype = dtype;
  PYLON_CHECK(device == "cuda" || !args.given("recompute"),
              "--recompute applies to --device cuda (the CPU path keeps every activation)");
  o.recompute = parse_recompute(recompute);
  PYLON_CHECK(device == "cuda" || (reduce_dtype == "fp32" && !whole_root && !o.one_gpu_reshard),
              "--reduce-dtype, --whole-root and --one-gpu-reshard apply to --device cuda (the CPU path reduces in "
              "fp32 and a CPU world of one reads its shards)");
  o.reduce_bf16 = reduce_dtype == "bf16";
  o.split_root = !whole_root;
  PYLON_CHECK(nproc >= 1 && nnodes >= 1, "--nproc-per-node and --nnodes must be >= 1");
  PYLON_CHECK(node_rank < nnodes, "--node-rank ", node_rank, " is outside 0..", nnodes - 1,
              " (this machine's index among --nnodes ", nnodes, ")");
  PYLON_CHECK(dist_timeout > 0, "--dist-timeout must be positive");
  PYLON_CHECK(!o.profile.counters || (device == "cuda" && !o.profile.dir.empty()),
              "--profile-roofline needs --device cuda and --profile DIR");
  PYLON_CHECK(!o.profile.counters || (nproc == 1 && nnodes == 1),
              "--profile-roofline replays every kernel about 20 times, which NCCL's kernels cannot do in step "
              "with their peers: profile one rank (without --nproc-per-node/--nnodes; every rank runs the same "
              "compute kernels)");
  PYLON_CHECK(!o.profile.counters || profile::counter_profiling_available(),
              "--profile-roofline: this build has no CUPTI (install the CUDA toolkit's CUPTI and rebuild)");
  PYLON_CHECK(o.profile.dir.empty() || device == "cpu" || profile::device_tracing_available(),
              "--profile --device cuda: this build has no CUPTI (install the CUDA toolkit's CUPTI and rebuild)");
  PYLON_CHECK(seed >= 0, "--seed must be non-negative");
  PYLON_CHECK(warmup >= 0, "--warmup must be non-negative");

  if (o.data.empty()) {
    const DefaultData d = ensure_default_data();
    o.data = d.train_bin;
    if (o.val_data.empty()) o.val_data = d.val_bin;
    if (o.tokenizer.empty()) o.tokenizer = d.tokenizer_model;
    if (!args.given("vocab")) vocab = Tokenizer::load(d.tokenizer_model).vocab_size();
  }
  o.model.set_preset(find_preset(preset));
  o.model.vocab = vocab, o.model.dim = dim, o.model.layers = layers, o.model.heads = heads;
  if (o.model.preset.naming == Naming::hugging_face) {  // Llama's per-model options
    o.model.kv_heads = kv_heads, o.model.head_size = head_dim, o.model.ffn_dim = ffn_dim;
    o.model.qkv_bias = qkv_bias || attention_bias, o.model.out_bias = attention_bias;
    o.model.tied_head = tie_embeddings;
    o.model.norm_eps = 1e-5f;
  } else {
    PYLON_CHECK(!args.given("kv-heads") && !args.given("head-dim") && !args.given("ffn-dim") && !qkv_bias &&
                    !attention_bias && !tie_embeddings,
                "--kv-heads, --head-dim, --ffn-dim, --qkv-bias, --attention-bias and --tie-embeddings are the llama ",
                "preset's (the ", preset, " preset is nn.MultiheadAttention's model)");
  }
  if (norm_eps != 0) o.model.norm_eps = norm_eps;
  o.model.rope_theta = rope_theta;
  if (!o.init_from.empty()) {  // a Pylon checkpoint's files are checked before anything reads them
    PYLON_CHECK(std::filesystem::exists(o.init_from), "--init-from ", o.init_from, ": no such file or directory");
    const bool first_process = nproc == 1 && nnodes == 1 && env_int("RANK", 0, 0, 1 << 20) == 0;
    if (!verify_checkpoint_files(o.init_from) && first_process)
      std::printf("%s\n", checkpoint_without_checksums_warning(o.init_from).c_str());
  }
  if (!o.init_from.empty() && std::filesystem::is_directory(o.init_from)) {
    // A folder of weights (Hugging Face's, or a Pylon step folder): the model is its config's.
    for (const char* flag : {"preset", "vocab", "dim", "layers", "heads", "kv-heads", "head-dim", "ffn-dim", "norm-eps",
                             "rope-theta", "qkv-bias", "attention-bias", "tie-embeddings"})
      PYLON_CHECK(!args.given(flag), "--", flag, " with --init-from ", o.init_from,
                  ": the model comes from the folder's config (drop --", flag, ")");
    o.model = config_from_weights(SafetensorsReader(o.init_from), o.model, false, false);
    if (o.tokenizer.empty()) resolve_model_path(o.init_from, &o.tokenizer);  // its tokenizer, if it has one
  }
  if (!o.init_from.empty() && !std::filesystem::is_directory(o.init_from)) {
    // A file Pylon wrote carries its model in pylon.* metadata: flags that describe another model
    // (same shapes, other heads or preset) are an error, as in eval and export; so is bad metadata.
    const SafetensorsReader file(o.init_from);
    const bool pylon_file = std::any_of(file.metadata().begin(), file.metadata().end(),
                                        [](const auto& kv) { return kv.first.rfind("pylon.", 0) == 0; });
    if (pylon_file) {
      const auto saved = config_from_weights(file, o.model, args.given("preset"), args.given("heads")).to_metadata();
      const auto flags = o.model.to_metadata();
      for (const auto& [key, value] : saved) {
        const auto it = flags.find(key);
        PYLON_CHECK(it != flags.end() && it->second == value, "--init-from ", o.init_from, ": the file's model has ",
                    key, " ", value, ", the flags give ", it == flags.end() ? "none" : it->second,
                    " (give the saved model's flags, or its step folder to take its config)");
      }
    }
  }
  if (!o.tokenizer.empty())  // checked now rather than at the first save (check_train_options loads it)
    PYLON_CHECK(std::filesystem::is_regular_file(resolve_tokenizer_path(o.tokenizer)), "--tokenizer ", o.tokenizer,
                ": no such file");
  o.model.validate();
  o.schedule.kind = parse_lr_schedule(schedule);
  o.schedule.lr = o.adamw.lr;
  o.schedule.warmup = warmup;
  o.seed = static_cast<uint64_t>(seed);
  o.reshard_after_forward = !no_reshard;
  o.prefetch = !no_prefetch;
  o.faults.crash_rank = static_cast<int>(env_int("PYLON_TEST_CRASH_RANK", -1, -1, 1 << 20));
  o.faults.crash_step = env_int("PYLON_TEST_CRASH_STEP", 1, 1, int64_t{1} << 40);
  o.faults.hang_rank = static_cast<int>(env_int("PYLON_TEST_HANG_RANK", -1, -1, 1 << 20));
  o.faults.hang_step = env_int("PYLON_TEST_HANG_STEP", 1, 1, int64_t{1} << 40);

  if (nproc > 1 || nnodes > 1) {  // the launcher: the ranks re-run this command line
    const CheckpointInfo resume = check_train_options(o, nproc * nnodes, nproc);  // bad input: one error here, not one per rank
    // Each rank checks only what it reads, and a rank's error can be lost behind the collective
    // failure it causes on the others: corrupted input is named here, once, before the ranks start.
    if (!o.resume_dir.empty()) {
      verify_checkpoint_shards(resume);
      if (!resume.checksums)  // from before checksums: at least no NaN or Inf
        for (int q = 0; q < resume.world; ++q)
          check_all_finite(SafetensorsReader(resume.folder + "/" + shard_file_name(q, resume.world)));
    }
    if (!o.init_from.empty()) check_all_finite(SafetensorsReader(o.init_from));
    if (o.device == "cuda") {      // one GPU per local rank (the runtime is not used before the fork+exec)
#ifdef PYLON_HAVE_CUDA
      const int visible = cuda::device_count();
      PYLON_CHECK(visible > 0, "--device cuda: no CUDA device is visible (driver missing, or "
                               "CUDA_VISIBLE_DEVICES empty)");
      PYLON_CHECK(nproc <= visible, "--nproc-per-node ", nproc, " --device cuda: needs ", nproc,
                  " GPUs on this machine, ", visible, " visible");
#else
      throw Error("--device cuda: this build has no CUDA backend (install the CUDA toolkit and rebuild)");
#endif
    }
    LaunchOptions l;
    l.nproc_per_node = nproc, l.nnodes = nnodes, l.node_rank = node_rank;
    l.master_addr = master_addr, l.master_port = master_port;
    l.args = strip_flags(argc, argv, 1,
                         {"nproc-per-node", "nnodes", "node-rank", "master-addr", "master-port"});
    return launch_ranks(l);
  }
  TrainResult r;
  const DistEnv env = dist_env_from_environment(master_addr, master_port);
  const std::chrono::milliseconds timeout(static_cast<int64_t>(dist_timeout * 1000.0));
  share_cores_among_local_ranks(env.local_world);
  if (o.device == "cuda") {
#ifdef PYLON_HAVE_CUDA
    r = train_cuda(o, env, timeout);  // GPU = LOCAL_RANK; NCCL when world > 1
#else
    throw Error("--device cuda: this build has no CUDA backend (install the CUDA toolkit and rebuild)");
#endif
  } else {
    const auto comm = make_communicator(env, timeout);
    r = train(o, *comm);
  }
  if (env.rank != 0) return 0;
  const int world = env.world;
  std::printf("trained %lld steps in %s: final loss %.4f", static_cast<long long>(r.steps_done),
              format_duration(r.seconds).c_str(), static_cast<double>(r.final_loss));
  if (r.final_val_loss >= 0) std::printf(", val loss %.4f", r.final_val_loss);
  std::printf("; peak memory %.0f MiB%s\n", static_cast<double>(r.peak_mem_bytes) / (1 << 20),
              world > 1 ? " (max over ranks)" : "");
  return 0;
}

}  // namespace pylon
