// The CPU ranks' training step (fp32, FSDP over the communicator: Gloo, or one rank) in the one
// training loop (train/loop.h), and the checks every run starts with.
#include "train/trainer.h"

#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/timer.h"
#include "dist/fsdp.h"
#include "dist/shard_layout.h"
#include "io/safetensors.h"
#include "io/token_file.h"
#include "model/minillm.h"
#include "model/weights.h"
#include "profile/tracer.h"
#include "train/checkpoint.h"
#include "train/data_loader.h"
#include "train/loop.h"
#ifdef PYLON_HAVE_CUDA
#include "train/cuda/trainer_cuda.h"
#endif

namespace pylon {
namespace {

// A step runs to its end in run(): forward and backward over the micro-steps with FSDP's hooks,
// one all-reduce of the loss and the squared gradient norm, clipping, AdamW on the shards.
class CpuStep final : public TrainStep {
 public:
  CpuStep(const TrainOptions& o, const CheckpointInfo& resume, Communicator& comm)
      : o_(o), model_(o.model), layout_(model_.table(), comm.world()), fsdp_(layout_, comm, fsdp_options(o, comm)) {
    init_shards(o, resume, fsdp_);
    tokens_.resize(static_cast<size_t>(o.grad_accum) * 2 * rows());
    const int64_t global_tokens = static_cast<int64_t>(o.batch) * o.seq * comm.world() * o.grad_accum;
    loss_scale_ = 1.f / static_cast<float>(global_tokens);
  }

  std::string describe() const override { return "in fp32 on CPU ranks"; }
  int lag() const override { return 0; }
  int32_t* tokens(int64_t) override { return tokens_.data(); }

  void run(int64_t t, float lr) override {
    Communicator& comm = fsdp_.comm();
    const Stopwatch clock;
    fsdp_.zero_grad();
    double local_loss = 0;
    for (int a = 0; a < o_.grad_accum; ++a) {
      const int32_t* inputs = tokens_.data() + static_cast<size_t>(2 * a) * rows();
      fsdp_.set_reduce_grads(!o_.no_sync || a + 1 == o_.grad_accum);
      local_loss += model_.forward(fsdp_.params(), inputs, inputs + rows(), o_.batch, o_.seq, &fsdp_);
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
    std::vector<int32_t> inputs(rows()), targets(rows());
    double sum = 0;
    fsdp_.set_forward_only(true);
    for (int64_t m = 0; m < steps; ++m) {
      {
        PYLON_RANGE("data", "data_load");
        loader.load(m, inputs.data(), targets.data());
      }
      sum += model_.forward(fsdp_.params(), inputs.data(), targets.data(), o_.batch, o_.seq, &fsdp_);
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
  std::vector<int32_t> tokens_;  // grad_accum x [inputs, targets]
  float loss_scale_ = 1;
  StepResult result_;
};

}  // namespace

CheckpointInfo check_train_options(const TrainOptions& o) {
  PYLON_CHECK(o.batch > 0 && o.seq > 0, "--batch and --seq must be positive");
  PYLON_CHECK(o.steps > 0, "--steps must be positive, got ", o.steps);
  PYLON_CHECK(o.grad_accum > 0, "--grad-accum must be positive, got ", o.grad_accum);
  PYLON_CHECK(o.grad_clip >= 0, "--grad-clip must be >= 0 (0 = off)");
  PYLON_CHECK(o.adamw.lr > 0, "--lr must be positive");
  PYLON_CHECK(o.adamw.beta1 >= 0 && o.adamw.beta1 < 1 && o.adamw.beta2 >= 0 && o.adamw.beta2 < 1,
              "--beta1 and --beta2 must be in [0, 1)");
  PYLON_CHECK(o.eval_steps > 0 || o.eval_every == 0 || o.val_data.empty(), "--eval-steps must be positive");
  PYLON_CHECK(o.init_from.empty() || o.resume_dir.empty(), "--init-from and --resume exclude each other");
  PYLON_CHECK(!o.cuda_graph || o.device == "cuda", "--cuda-graph needs --device cuda");
  PYLON_CHECK(!o.cuda_graph || o.profile.dir.empty(),
              "--cuda-graph and --profile exclude each other: a replayed step has no host ranges or launches to trace");
  PYLON_CHECK(!o.data.empty(), "no training data (--data FILE)");
  o.model.validate();
  const TokenFile data(o.data);  // exists and is a token file (the vocab scan comes with training)
  if (!o.val_data.empty()) {
    const TokenFile val(o.val_data);
  }
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
  const profile::Schedule& s = o.profile.schedule;
  PYLON_CHECK(s.wait >= 0 && s.warmup >= 0 && s.active > 0,
              "--profile-wait and --profile-warmup must be >= 0, --profile-active > 0");
  PYLON_CHECK(o.profile.dir.empty() || s.first_active() < o.steps - resume.step, "--profile: wait ",
              s.wait, " + warmup ", s.warmup, " steps leave no active step within the run's ",
              o.steps - resume.step, " steps");
  if (!o.init_from.empty()) {
    const SafetensorsReader file(o.init_from);
    const ParamTable table = param_table(o.model);
    for (const auto& p : table.params) read_param_range(file, p, 0, 0, nullptr);  // names, shapes
  }
  return resume;
}

TrainResult train(const TrainOptions& o, Communicator& comm) {
  const CheckpointInfo resume = check_train_options(o);
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
