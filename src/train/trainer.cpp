#include "train/trainer.h"

#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/timer.h"
#include "io/safetensors.h"
#include "io/token_file.h"
#include "model/minillm.h"
#include "model/weights.h"
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
  return {{"preset", preset_name(o.model.preset)}, {"vocab", o.model.vocab}, {"dim", o.model.dim},
          {"layers", o.model.layers}, {"heads", o.model.heads}, {"batch", o.batch},
          {"seq", o.seq}, {"steps", o.steps}, {"grad_accum", o.grad_accum}, {"lr", o.adamw.lr},
          {"weight_decay", o.adamw.weight_decay}, {"beta1", o.adamw.beta1},
          {"beta2", o.adamw.beta2}, {"adam_eps", o.adamw.eps}, {"grad_clip", o.grad_clip},
          {"lr_schedule", o.schedule.kind == LrSchedule::cosine ? "cosine" : "constant"},
          {"warmup", o.schedule.warmup}, {"min_lr_frac", o.schedule.min_lr_frac},
          {"seed", o.seed}, {"data", o.data}};
}

}  // namespace

TrainResult train(const TrainOptions& o) {
  if (o.device == "cuda") {
#ifdef PYLON_HAVE_CUDA
    return train_cuda(o);
#else
    throw Error("--device cuda: this build has no CUDA backend (install the CUDA toolkit and rebuild)");
#endif
  }
  PYLON_CHECK(o.batch > 0 && o.seq > 0, "--batch and --seq must be positive");
  PYLON_CHECK(o.steps > 0, "--steps must be positive, got ", o.steps);
  PYLON_CHECK(o.grad_accum > 0, "--grad-accum must be positive, got ", o.grad_accum);
  PYLON_CHECK(o.grad_clip >= 0, "--grad-clip must be >= 0 (0 = off)");
  PYLON_CHECK(o.adamw.lr > 0, "--lr must be positive");
  PYLON_CHECK(o.adamw.beta1 >= 0 && o.adamw.beta1 < 1 && o.adamw.beta2 >= 0 && o.adamw.beta2 < 1,
              "--beta1 and --beta2 must be in [0, 1)");
  PYLON_CHECK(o.init_from.empty() || o.resume_dir.empty(), "--init-from and --resume exclude each other");

  // Parameters and optimizer state: resumed, loaded, or initialised from the seed.
  ModelConfig config = o.model;
  std::vector<float> params, m, v;
  int64_t start_step = 0;
  std::string tokenizer = o.tokenizer;
  if (!o.resume_dir.empty()) {
    CheckpointData c = load_checkpoint(o.resume_dir);
    PYLON_CHECK(c.config.dim == config.dim && c.config.layers == config.layers &&
                    c.config.heads == config.heads && c.config.vocab == config.vocab &&
                    c.config.preset == config.preset,
                o.resume_dir, ": checkpoint model (", preset_name(c.config.preset), " V", c.config.vocab,
                " D", c.config.dim, " L", c.config.layers, " H", c.config.heads,
                ") differs from the requested one");
    params = std::move(c.params), m = std::move(c.m), v = std::move(c.v);
    start_step = c.step;
    if (tokenizer.empty()) tokenizer = c.tokenizer_path;
    PYLON_CHECK(start_step < o.steps, o.resume_dir, ": already at step ", start_step,
                ", nothing to do for --steps ", o.steps);
  }
  MiniLLM model(config);
  const ParamTable& table = model.table();
  const int64_t n = table.total;
  if (params.empty()) {
    params.resize(n);
    if (!o.init_from.empty()) {
      const SafetensorsReader file(o.init_from);
      load_weights(file, table, params.data());
    } else {
      init_params(table, o.seed, params.data());
    }
    m.assign(n, 0.f), v.assign(n, 0.f);
  }
  std::vector<float> grads(n);

  PYLON_CHECK(!o.data.empty(), "no training data (--data FILE)");
  const TokenFile data(o.data);
  data.check_vocab(config.vocab);
  std::unique_ptr<TokenFile> val;
  if (!o.val_data.empty()) {
    val = std::make_unique<TokenFile>(o.val_data);
    val->check_vocab(config.vocab);
  }
  const DataLoader loader(data, o.batch, o.seq);
  const size_t rows = static_cast<size_t>(o.batch) * o.seq;
  std::vector<int32_t> inputs(rows), targets(rows);
  const int64_t tokens_per_step = loader.tokens_per_micro_step() * o.grad_accum;
  const float loss_scale = 1.f / static_cast<float>(tokens_per_step);

  std::printf("model: %s preset, %lld parameters (V=%d D=%d L=%d H=%d); batch %d x %d tokens x %d "
              "accum = %lld tokens/step; data %s (%lld tokens)%s\n",
              preset_name(config.preset), static_cast<long long>(n), config.vocab, config.dim,
              config.layers, config.heads, o.batch, o.seq, o.grad_accum,
              static_cast<long long>(tokens_per_step), o.data.c_str(),
              static_cast<long long>(data.size()),
              start_step ? (", resumed at step " + std::to_string(start_step)).c_str() : "");
  std::fflush(stdout);

  MetricsLog metrics(o.metrics_path, start_step > 0);
  auto save = [&](int64_t step_done) {
    CheckpointData c{config, step_done, params, m, v, {{"options", options_json(o)}}, tokenizer};
    const std::string path = save_checkpoint(o.save_dir, c);
    std::printf("saved checkpoint %s\n", path.c_str());
  };

  TrainResult result;
  const Stopwatch run_clock;
  double train_seconds = 0;
  for (int64_t step = start_step; step < o.steps; ++step) {
    const Stopwatch step_clock;
    std::fill(grads.begin(), grads.end(), 0.f);
    double loss = 0;
    for (int a = 0; a < o.grad_accum; ++a) {
      loader.load(step * o.grad_accum + a, inputs.data(), targets.data());
      loss += model.forward(params.data(), inputs.data(), targets.data(), o.batch, o.seq);
      model.backward(params.data(), grads.data(), loss_scale);
    }
    loss /= o.grad_accum;
    const double grad_norm = std::sqrt(sum_of_squares(grads.data(), n));
    PYLON_CHECK(std::isfinite(loss) && std::isfinite(grad_norm), "training diverged at step ",
                step + 1, ": loss ", loss, ", grad norm ", grad_norm, " (lower --lr?)");
    if (o.grad_clip > 0 && grad_norm > o.grad_clip)  // torch.nn.utils.clip_grad_norm_
      scale_in_place(grads.data(), n, static_cast<float>(o.grad_clip / (grad_norm + 1e-6)));
    const float lr = lr_at(o.schedule, step, o.steps);
    adamw_update(params.data(), grads.data(), m.data(), v.data(), n, lr, o.adamw, step + 1);
    const double dt = step_clock.seconds();
    train_seconds += dt;

    const int64_t done = step + 1;
    const double tok_s = static_cast<double>(tokens_per_step) / dt;
    nlohmann::json row = {{"step", done}, {"loss", loss}, {"lr", lr}, {"grad_norm", grad_norm},
                          {"tokens_per_s", tok_s}, {"peak_mem_bytes", peak_rss_bytes()},
                          {"step_s", dt}};
    const bool last = done == o.steps;
    if (val && o.eval_every > 0 && (done % o.eval_every == 0 || last)) {
      const EvalResult e = evaluate(model, params.data(), *val, o.batch, o.seq, o.eval_steps);
      row["val_loss"] = e.loss;
      result.final_val_loss = e.loss;
    }
    metrics.write(row);
    if (done == start_step + 1 || last || (o.log_every > 0 && done % o.log_every == 0) ||
        row.contains("val_loss")) {
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
  }
  if (!o.save_dir.empty()) save(o.steps);
  result.seconds = run_clock.seconds();
  return result;
}

}  // namespace pylon
