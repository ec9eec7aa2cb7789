#include "train/trainer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/timer.h"
#include "dist/fault_injection.h"
#include "dist/fsdp.h"
#include "dist/shard_layout.h"
#include "io/safetensors.h"
#include "io/token_file.h"
#include "model/minillm.h"
#include "profile/session.h"
#include "profile/tracer.h"
#include "train/checkpoint.h"
#include "train/data_loader.h"
#include "train/evaluate.h"
#ifdef PYLON_HAVE_CUDA
#include "train/cuda/trainer_cuda.h"
#endif

namespace pylon {
namespace {

class MetricsLog {
 public:
  MetricsLog(const std::string& path, bool append) {
    if (path.empty()) return;
    file_ = std::fopen(path.c_str(), append ? "a" : "w");
    PYLON_CHECK(file_, path, ": cannot open metrics file for writing");
  }
  ~MetricsLog() {
    if (file_) std::fclose(file_);
  }
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;
  void write(const nlohmann::json& j) {
    if (!file_) return;
    const std::string line = j.dump() + "\n";
    PYLON_CHECK(std::fwrite(line.data(), 1, line.size(), file_) == line.size() &&
                    std::fflush(file_) == 0,
                "cannot write metrics (disk full?)");
  }

 private:
  std::FILE* file_ = nullptr;
};

nlohmann::json options_json(const TrainOptions& o) {
  return {{"preset", o.model.preset.name}, {"vocab", o.model.vocab}, {"dim", o.model.dim},
          {"layers", o.model.layers}, {"heads", o.model.heads}, {"batch", o.batch},
          {"seq", o.seq}, {"steps", o.steps}, {"grad_accum", o.grad_accum}, {"lr", o.adamw.lr},
          {"weight_decay", o.adamw.weight_decay}, {"beta1", o.adamw.beta1},
          {"beta2", o.adamw.beta2}, {"adam_eps", o.adamw.eps}, {"grad_clip", o.grad_clip},
          {"lr_schedule", o.schedule.kind == LrSchedule::cosine ? "cosine" : "constant"},
          {"warmup", o.schedule.warmup}, {"min_lr_frac", o.schedule.min_lr_frac},
          {"seed", o.seed}, {"data", o.data}, {"reshard_after_forward", o.reshard_after_forward},
          {"prefetch", o.prefetch},
          {"no_sync", o.no_sync}};
}

// Mean validation loss over `steps` micro-steps in the training order (DESIGN §2): the global
// micro-batch of W·B rows is split across the ranks as in training, so the value equals that of
// one rank with batch W·B.
double evaluate_sharded(MiniLLM& model, FsdpModel& fsdp, const TokenFile& data, int batch, int seq,
                        int64_t steps) {
  PYLON_RANGE("eval", "eval");
  Communicator& comm = fsdp.comm();
  const DataLoader loader(data, batch, seq, comm.rank(), comm.world());
  std::vector<int32_t> inputs(static_cast<size_t>(batch) * seq), targets(inputs.size());
  double sum = 0;
  fsdp.set_forward_only(true);
  for (int64_t m = 0; m < steps; ++m) {
    {
      PYLON_RANGE("data", "data_load");
      loader.load(m, inputs.data(), targets.data());
    }
    sum += model.forward(fsdp.params(), inputs.data(), targets.data(), batch, seq, &fsdp);
  }
  fsdp.set_forward_only(false);
  fsdp.sync();
  PYLON_RANGE("collective", "all_reduce");
  comm.all_reduce_sum(&sum, 1);
  return sum / static_cast<double>(steps * comm.world());
}

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
  PYLON_CHECK(o.profile.dir.empty() || s.wait + s.warmup < o.steps - resume.step, "--profile: wait ",
              s.wait, " + warmup ", s.warmup, " steps leave no active step within the run's ",
              o.steps - resume.step, " steps");
  if (!o.init_from.empty()) {
    const SafetensorsReader file(o.init_from);
    const ParamTable table = param_table(o.model);
    for (const auto& p : table.params) file.read_f32_range(p.name, p.shape, 0, 0, nullptr);  // names, shapes
  }
  return resume;
}

TrainResult train(const TrainOptions& o, Communicator& comm) {
  const CheckpointInfo resume = check_train_options(o);
  const int rank = comm.rank(), world = comm.world();
  const bool lead = rank == 0;

  // The model, its shards on this rank, and their values: resumed, loaded, or from the seed.
  const ModelConfig config = o.model;
  const int64_t start_step = o.resume_dir.empty() ? 0 : resume.step;
  const std::string tokenizer = o.tokenizer.empty() ? resume.tokenizer_path : o.tokenizer;
  MiniLLM model(config);
  const ShardLayout layout(model.table(), world);
  FsdpOptions fsdp_options;
  fsdp_options.reshard_after_forward = o.reshard_after_forward;
  fsdp_options.poison_resharded = o.check_reshard;
  fsdp_options.prefetch = o.prefetch;
  fsdp_options.return_memory = world > 1;  // see FsdpOptions
  FsdpModel fsdp(layout, comm, fsdp_options);
  if (!o.resume_dir.empty()) {
    load_checkpoint_shards(resume, layout, rank, fsdp.shards());
  } else if (!o.init_from.empty()) {
    fsdp.load_params(SafetensorsReader(o.init_from));
  } else {
    fsdp.init_params(o.seed);
  }

  const TokenFile data(o.data);
  data.check_vocab(config.vocab);
  std::unique_ptr<TokenFile> val;
  if (!o.val_data.empty()) {
    val = std::make_unique<TokenFile>(o.val_data);
    val->check_vocab(config.vocab);
  }
  const DataLoader loader(data, o.batch, o.seq, rank, world);
  const size_t rows = static_cast<size_t>(o.batch) * o.seq;
  std::vector<int32_t> inputs(rows), targets(rows);
  const int64_t tokens_per_step = loader.tokens_per_micro_step() * o.grad_accum;  // all ranks
  const float loss_scale = 1.f / static_cast<float>(tokens_per_step);
  const int64_t global_rows = static_cast<int64_t>(o.batch) * world * o.grad_accum;
  if (lead && !o.resume_dir.empty() && resume.trainer.contains("global_batch_rows") &&
      resume.trainer["global_batch_rows"] != global_rows)
    std::printf("warning: %s was trained with %lld rows per step, this run uses %lld: the data "
                "order and the loss curve change\n",
                o.resume_dir.c_str(), resume.trainer["global_batch_rows"].get<long long>(),
                static_cast<long long>(global_rows));

  if (lead) {
    std::printf("model: %s preset, %lld parameters (V=%d D=%d L=%d H=%d); %d rank%s x batch %d x %d "
                "tokens x %d accum = %lld tokens/step; data %s (%lld tokens)%s\n",
                config.preset.name, static_cast<long long>(layout.table().total),
                config.vocab, config.dim, config.layers, config.heads, world, world > 1 ? "s" : "",
                o.batch, o.seq, o.grad_accum, static_cast<long long>(tokens_per_step),
                o.data.c_str(), static_cast<long long>(data.size()),
                start_step ? (", resumed at step " + std::to_string(start_step)).c_str() : "");
    std::fflush(stdout);
  }

  MetricsLog metrics(lead ? o.metrics_path : "", start_step > 0);
  auto save = [&](int64_t step_done) {
    PYLON_RANGE("checkpoint", "checkpoint_save");
    nlohmann::json trainer = {{"options", options_json(o)}, {"global_batch_rows", global_rows}};
    const std::string path = save_checkpoint(o.save_dir, {config, step_done, trainer, tokenizer}, fsdp);
    if (lead) std::printf("saved checkpoint %s\n", path.c_str());
  };

  profile::ProfileSession profiler(o.profile, rank);
  TrainResult result;
  const Stopwatch run_clock;
  double train_seconds = 0;
  // Per step, one all-reduce of: Σ micro-step losses, Σ grad², and each rank's peak memory.
  std::vector<double> scalars(2 + static_cast<size_t>(world));
  for (int64_t step = start_step; step < o.steps; ++step) {
    inject_test_faults(rank, step + 1);
    profiler.step(step - start_step);
    profile::Range step_range("step", "train_step");
    if (step_range.on()) step_range.set_int("step", step + 1);
    const Stopwatch step_clock;
    fsdp.zero_grad();
    double local_loss = 0;
    for (int a = 0; a < o.grad_accum; ++a) {
      {
        PYLON_RANGE("data", "data_load");
        loader.load(step * o.grad_accum + a, inputs.data(), targets.data());
      }
      fsdp.set_reduce_grads(!o.no_sync || a + 1 == o.grad_accum);
      local_loss += model.forward(fsdp.params(), inputs.data(), targets.data(), o.batch, o.seq, &fsdp);
      model.backward(fsdp.params(), fsdp.grads(), loss_scale, &fsdp);
    }
    std::fill(scalars.begin(), scalars.end(), 0.0);
    scalars[0] = local_loss;
    scalars[1] = fsdp.local_grad_sum_of_squares();
    scalars[2 + static_cast<size_t>(rank)] = static_cast<double>(peak_rss_bytes());
    {
      PYLON_RANGE("collective", "all_reduce");
      comm.all_reduce_sum(scalars.data(), scalars.size());
    }
    const double loss = scalars[0] / (world * o.grad_accum);  // every rank scored as many tokens
    const double grad_norm = std::sqrt(scalars[1]);
    PYLON_CHECK(std::isfinite(loss) && std::isfinite(grad_norm), "training diverged at step ",
                step + 1, ": loss ", loss, ", grad norm ", grad_norm, " (lower --lr?)");
    if (o.grad_clip > 0 && grad_norm > o.grad_clip) {  // torch.nn.utils.clip_grad_norm_
      PYLON_RANGE("optimizer", "clip_grad");
      fsdp.scale_grads(static_cast<float>(o.grad_clip / (grad_norm + 1e-6)));
    }
    const float lr = lr_at(o.schedule, step, o.steps);
    {
      PYLON_RANGE("optimizer", "adamw");
      fsdp.adamw_step(lr, o.adamw, step + 1);
    }
    const double dt = step_clock.seconds();
    train_seconds += dt;

    const int64_t done = step + 1;
    const double tok_s = static_cast<double>(tokens_per_step) / dt;
    std::vector<int64_t> mem_per_rank(static_cast<size_t>(world));
    for (int r = 0; r < world; ++r) mem_per_rank[static_cast<size_t>(r)] = static_cast<int64_t>(scalars[2 + r]);
    const int64_t peak_mem = *std::max_element(mem_per_rank.begin(), mem_per_rank.end());
    nlohmann::json row = {{"step", done}, {"loss", loss}, {"lr", lr}, {"grad_norm", grad_norm},
                          {"tokens_per_s", tok_s}, {"peak_mem_bytes", peak_mem},
                          {"step_s", dt}, {"world", world}};
    if (world > 1) row["peak_mem_bytes_per_rank"] = mem_per_rank;
    const bool last = done == o.steps;
    if (val && o.eval_every > 0 && (done % o.eval_every == 0 || last)) {
      row["val_loss"] = result.final_val_loss =
          evaluate_sharded(model, fsdp, *val, o.batch, o.seq, o.eval_steps);
    }
    metrics.write(row);
    if (lead && (done == start_step + 1 || last || (o.log_every > 0 && done % o.log_every == 0) ||
                 row.contains("val_loss"))) {
      const double eta = train_seconds / static_cast<double>(done - start_step) *
                         static_cast<double>(o.steps - done);
      std::printf("step %6lld/%lld  loss %.4f%s  lr %.2e  norm %.3f  %.0f tok/s  eta %s\n",
                  static_cast<long long>(done), static_cast<long long>(o.steps), loss,
                  row.contains("val_loss")
                      ? ("  val " + std::to_string(row["val_loss"].get<double>()).substr(0, 6)).c_str()
                      : "",
                  static_cast<double>(lr), grad_norm, tok_s, format_duration(eta).c_str());
      std::fflush(stdout);
    }
    if (!o.save_dir.empty() && o.save_every > 0 && done % o.save_every == 0 && !last) save(done);
    result.final_loss = static_cast<float>(loss);
    result.steps_done = done;
    result.peak_mem_bytes = peak_mem;
  }
  if (!o.save_dir.empty()) save(o.steps);
  profiler.finish();
  comm.barrier();  // nobody tears down its connections while a peer may still need them
  result.seconds = run_clock.seconds();
  return result;
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
