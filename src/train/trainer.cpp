// The CPU ranks' training step (fp32, FSDP over the communicator: Gloo, or one rank) in the one
// training loop (train/loop.h), and the checks every run starts with.
#include "train/trainer.h"

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <system_error>
#include <vector>

#include "core/checked.h"
#include "core/error.h"
#include "core/timer.h"
#include "dist/fsdp.h"
#include "dist/shard_layout.h"
#include "io/safetensors.h"
#include "io/token_file.h"
#include "io/tokenizer.h"
#include "model/minillm.h"
#include "model/weights.h"
#include "profile/tracer.h"
#include "train/checkpoint.h"
#include "train/data_loader.h"
#include "train/loop.h"
#include "train/memory_plan.h"
#include "train/progress.h"
#ifdef PYLON_HAVE_CUDA
#include "train/cuda/trainer_cuda.h"
#endif

namespace pylon {
namespace {

// A step runs to its end in run(): forward and backward over the micro-steps with FSDP's hooks,
// each micro-batch loaded just before its forward (one micro-batch of tokens held, whatever
// --grad-accum), one all-reduce of the loss and the squared gradient norm, clipping, AdamW on the
// shards.
class CpuStep final : public TrainStep {
 public:
  CpuStep(const TrainOptions& o, const CheckpointInfo& resume, Communicator& comm)
      : o_(o), model_(o.model), layout_(model_.table(), comm.world()), fsdp_(layout_, comm, fsdp_options(o, comm)) {
    init_shards(o, resume, fsdp_);
    inputs_.resize(rows()), targets_.resize(rows());
    const int64_t global_tokens = checked_mul({o.batch, o.seq, comm.world(), o.grad_accum}, "tokens per step");
    loss_scale_ = 1.f / static_cast<float>(global_tokens);
  }

  std::string describe() const override { return "in fp32 on CPU ranks"; }
  int lag() const override { return 0; }

  void run(const StepBatches& batches, float lr) override {
    const int64_t t = batches.step();
    Communicator& comm = fsdp_.comm();
    const Stopwatch clock;
    fsdp_.zero_grad();
    double local_loss = 0;
    ProgressLine progress("step " + std::to_string(t) + ": micro-steps", o_.grad_accum, comm.rank() == 0);
    for (int a = 0; a < o_.grad_accum; ++a) {
      if (a) progress.done(a);
      batches.load(a, inputs_.data(), targets_.data());
      fsdp_.set_reduce_grads(!o_.no_sync || a + 1 == o_.grad_accum);
      local_loss += model_.forward(fsdp_.params(), inputs_.data(), targets_.data(), o_.batch, o_.seq, &fsdp_);
      model_.backward(fsdp_.params(), fsdp_.grads(), loss_scale_, &fsdp_);
    }
    double scalars[2] = {local_loss, fsdp_.local_grad_sum_of_squares()};
    {
      PYLON_RANGE("collective", "all_reduce");
      comm.all_reduce_sum(scalars, 2);
    }
    result_.loss = scalars[0] / (comm.world() * o_.grad_accum);  // every rank scored as many tokens
    result_.grad_norm = std::sqrt(scalars[1]);
    if (std::isfinite(result_.loss) && std::isfinite(result_.grad_norm)) {  // else the loop stops there
      if (o_.grad_clip > 0 && result_.grad_norm > o_.grad_clip) {  // torch.nn.utils.clip_grad_norm_
        PYLON_RANGE("optimizer", "clip_grad");
        fsdp_.scale_grads(static_cast<float>(o_.grad_clip / (result_.grad_norm + 1e-6)));
      }
      PYLON_RANGE("optimizer", "adamw");
      fsdp_.adamw_step(lr, o_.adamw, t);
    }
    result_.ms = clock.seconds() * 1e3;
    result_.peak_mem_bytes = peak_rss_bytes();
  }

  StepResult result(int64_t) override { return result_; }

  // The global micro-batch of W·B rows split across the ranks as in training, so the value equals
  // that of one rank with batch W·B.
  double evaluate(const TokenFile& data, int64_t steps) override {
    PYLON_RANGE("eval", "eval");
    Communicator& comm = fsdp_.comm();
    const DataLoader loader(data, o_.batch, o_.seq, comm.rank(), comm.world());
    double sum = 0;
    fsdp_.set_forward_only(true);
    ProgressLine progress("validation: micro-batches", steps, comm.rank() == 0);
    for (int64_t m = 0; m < steps; ++m) {
      if (m) progress.done(m);
      {
        PYLON_RANGE("data", "data_load");
        loader.load(m, inputs_.data(), targets_.data());
      }
      sum += model_.forward(fsdp_.params(), inputs_.data(), targets_.data(), o_.batch, o_.seq, &fsdp_);
    }
    fsdp_.set_forward_only(false);
    fsdp_.sync();
    PYLON_RANGE("collective", "all_reduce");
    comm.all_reduce_sum(&sum, 1);
    return sum / static_cast<double>(steps * comm.world());
  }

  FsdpModel& checkpoint_shards() override { return fsdp_; }

 private:
  static FsdpOptions fsdp_options(const TrainOptions& o, const Communicator& comm) {
    FsdpOptions f;
    f.reshard_after_forward = o.reshard_after_forward;
    f.poison_resharded = o.check_reshard;
    f.prefetch = o.prefetch;
    f.return_memory = comm.world() > 1;  // see FsdpOptions
    return f;
  }
  size_t rows() const { return static_cast<size_t>(o_.batch) * o_.seq; }

  const TrainOptions& o_;
  MiniLLM model_;
  ShardLayout layout_;
  FsdpModel fsdp_;
  std::vector<int32_t> inputs_, targets_;  // (B, T): the micro-batch in use
  float loss_scale_ = 1;
  StepResult result_;
};

// A --save or --profile directory that can be made: it is a directory, or its nearest existing
// ancestor is one we may write in (else the run would fail at its first save, after the work).
void check_output_dir(const std::string& dir, const char* flag) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path p = fs::absolute(dir, ec);
  PYLON_CHECK(!ec, flag, " ", dir, ": ", ec.message());
  while (!fs::exists(p, ec) && p.has_relative_path()) {
    PYLON_CHECK(!ec || ec == std::errc::no_such_file_or_directory, flag, " ", dir, ": ", ec.message());
    p = p.parent_path();
  }
  PYLON_CHECK(fs::is_directory(p, ec), flag, " ", dir, ": ", p.string(), " is not a directory");
  PYLON_CHECK(::access(p.c_str(), W_OK | X_OK) == 0, flag, " ", dir, ": ", p.string(), " is not writable");
}

}  // namespace

CheckpointInfo check_train_options(const TrainOptions& o, int world, int local_ranks) {
  PYLON_CHECK(o.batch > 0 && o.seq > 0, "--batch and --seq must be positive");
  PYLON_CHECK(o.steps > 0, "--steps must be positive, got ", o.steps);
  PYLON_CHECK(o.grad_accum > 0, "--grad-accum must be positive, got ", o.grad_accum);
  // The command line's ranges (cli/train.cpp) again, for options built in code.
  PYLON_CHECK(o.grad_clip >= 0 && std::isfinite(o.grad_clip), "--grad-clip must be >= 0 (0 = off)");
  PYLON_CHECK(o.adamw.lr > 0 && std::isfinite(o.adamw.lr), "--lr must be positive");
  PYLON_CHECK(o.adamw.beta1 >= 0 && o.adamw.beta1 < 1 && o.adamw.beta2 >= 0 && o.adamw.beta2 < 1,
              "--beta1 and --beta2 must be in [0, 1)");
  PYLON_CHECK(o.adamw.weight_decay >= 0 && std::isfinite(o.adamw.weight_decay), "--weight-decay must be >= 0");
  PYLON_CHECK(o.adamw.eps > 0 && std::isfinite(o.adamw.eps), "--adam-eps must be positive");
  PYLON_CHECK(o.schedule.min_lr_frac >= 0 && o.schedule.min_lr_frac <= 1, "--min-lr-frac must be in [0, 1]");
  PYLON_CHECK(o.eval_every >= 0 && o.save_every >= 0 && o.log_every >= 0,
              "--eval-every, --save-every and --log-every must be >= 0");
  PYLON_CHECK(o.eval_steps > 0 || o.eval_every == 0 || o.val_data.empty(), "--eval-steps must be positive");
  PYLON_CHECK(o.init_from.empty() || o.resume_dir.empty(), "--init-from and --resume exclude each other");
  if (!o.save_dir.empty()) check_output_dir(o.save_dir, "--save");
  if (!o.profile.dir.empty()) check_output_dir(o.profile.dir, "--profile");
  PYLON_CHECK(!o.cuda_graph || o.device == "cuda", "--cuda-graph needs --device cuda");
  PYLON_CHECK(!o.cuda_graph || o.profile.dir.empty(),
              "--cuda-graph and --profile exclude each other: a replayed step has no host ranges or launches to trace");
  PYLON_CHECK(!o.data.empty(), "no training data (--data FILE)");
  // The data position of the last step (train/data_loader.cpp) in 64 bits.
  checked_mul({o.steps, o.grad_accum, o.batch, o.seq, world}, "--steps x --grad-accum x --batch x --seq tokens");
  o.model.validate();
  // The memory plan, before any file is read or buffer allocated. On GPUs each rank compares it with
  // its device's free memory (train/cuda/trainer_cuda.cpp); here only that its sizes can be computed.
  MemoryPlan plan;
  try {
    plan = o.device == "cuda" ? cuda_train_memory(o, world) : cpu_train_memory(o.model, o.batch, o.seq, world);
  } catch (const Error& e) {
    throw Error("--device " + o.device + ": the model does not fit: " + e.what());
  }
  if (o.device == "cpu") check_fits(plan, local_ranks, available_host_bytes(), "--device cpu: the model");
  const TokenFile data(o.data);  // exists and is a token file (the vocab scan comes with training)
  if (!o.val_data.empty()) {
    const TokenFile val(o.val_data);
  }
  // The tokenizer a save copies into every checkpoint must load (a garbage one failed only at
  // generate); a resumed checkpoint's is checked by read_checkpoint_info. Before any collective.
  if (!o.tokenizer.empty()) check_tokenizer_file(o.tokenizer);
  CheckpointInfo resume;
  if (!o.resume_dir.empty()) {
    resume = read_checkpoint_info(o.resume_dir);
    const ModelConfig& c = resume.config;
    const ModelConfig& m = o.model;
    PYLON_CHECK(c.dim == m.dim && c.layers == m.layers && c.heads == m.heads && c.vocab == m.vocab &&
                    c.preset == m.preset,
                o.resume_dir, ": checkpoint model (", c.describe(), ") differs from the requested one (",
                m.describe(), ")");
    PYLON_CHECK(resume.step < o.steps, o.resume_dir, ": already at step ", resume.step,
                ", nothing to do for --steps ", o.steps);
  }
  profile::check_schedule(o.profile, o.steps - resume.step);
  if (!o.init_from.empty()) {
    const SafetensorsReader file(o.init_from);
    const ParamTable table = param_table(o.model);
    for (const auto& p : table.params) read_param_range(file, p, 0, 0, nullptr);  // names, shapes
  }
  return resume;
}

TrainResult train(const TrainOptions& o, Communicator& comm) {
  check_ranks_agree(o, comm);
  const CheckpointInfo resume = check_train_options(o, comm.world());
  CpuStep step(o, resume, comm);
  return run_training(o, resume, comm, step, o.profile);
}

TrainResult train(const TrainOptions& options) {
  if (options.device == "cuda") {
#ifdef PYLON_HAVE_CUDA
    return train_cuda(options);
#else
    throw Error("--device cuda: this build has no CUDA backend (install the CUDA toolkit and rebuild)");
#endif
  }
  const auto comm = make_single_rank_communicator();
  return train(options, *comm);
}

}  // namespace pylon
