#include "train/loop.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <numeric>
#include <vector>

#include "core/error.h"
#include "core/timer.h"
#include "dist/fault_injection.h"
#include "io/checksum.h"
#include "io/safetensors.h"
#include "model/params.h"
#include "profile/tracer.h"
#include "train/data_loader.h"
#include "train/schedule.h"

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
    PYLON_CHECK(std::fwrite(line.data(), 1, line.size(), file_) == line.size() && std::fflush(file_) == 0,
                "cannot write metrics (disk full?)");
  }

 private:
  std::FILE* file_ = nullptr;
};

// Every option of the run, for trainer.json.
nlohmann::json options_json(const TrainOptions& o, int world) {
  return {{"preset", o.model.preset.name},
          {"vocab", o.model.vocab},
          {"dim", o.model.dim},
          {"layers", o.model.layers},
          {"heads", o.model.heads},
          {"device", o.device},
          {"dtype", o.device == "cuda" ? o.dtype : "fp32"},
          {"world", world},
          {"batch", o.batch},
          {"seq", o.seq},
          {"steps", o.steps},
          {"grad_accum", o.grad_accum},
          {"lr", o.adamw.lr},
          {"weight_decay", o.adamw.weight_decay},
          {"beta1", o.adamw.beta1},
          {"beta2", o.adamw.beta2},
          {"adam_eps", o.adamw.eps},
          {"grad_clip", o.grad_clip},
          {"lr_schedule", o.schedule.kind == LrSchedule::cosine ? "cosine" : "constant"},
          {"warmup", o.schedule.warmup},
          {"min_lr_frac", o.schedule.min_lr_frac},
          {"seed", o.seed},
          {"data", o.data},
          {"reshard_after_forward", o.reshard_after_forward},
          {"prefetch", o.prefetch},
          {"no_sync", o.no_sync},
          {"reduce_bf16", o.reduce_bf16},
          {"split_root", o.split_root},
          {"one_gpu_reshard", o.one_gpu_reshard},
          {"recompute", recompute_name(o.recompute)},
          {"cuda_graph", o.cuda_graph}};
}

}  // namespace

void check_ranks_agree(const TrainOptions& o, Communicator& comm) {
  const int world = comm.world();
  if (world == 1) return;
  nlohmann::json run = options_json(o, world);
  run.erase("data");
  run["model"] = o.model.to_metadata();
  run["validation"] = {!o.val_data.empty() && o.eval_every > 0, o.eval_every, o.eval_steps};
  run["saves"] = {!o.save_dir.empty(), o.save_every};
  run["starts_from"] = {!o.resume_dir.empty(), !o.init_from.empty()};
  run["profile"] = {!o.profile.dir.empty(), o.profile.schedule.wait, o.profile.schedule.warmup,
                    o.profile.schedule.active, o.profile.device, o.profile.counters};
  run["check_reshard"] = o.check_reshard;
  const std::string text = run.dump();
  const uint64_t mine = xxh3_64(text.data(), text.size());
  uint64_t first = mine;  // rank 0's; fixed sizes: these two collectives cannot disagree
  comm.broadcast(&first, sizeof first, 0);
  std::vector<double> differs(static_cast<size_t>(world), 0.0);
  differs[static_cast<size_t>(comm.rank())] = first != mine ? 1.0 : 0.0;
  comm.all_reduce_sum(differs.data(), differs.size());
  std::string ranks;
  for (int r = 0; r < world; ++r)
    if (differs[static_cast<size_t>(r)] != 0) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  PYLON_CHECK(ranks.empty(), "rank ", comm.rank(), ": rank", ranks.find(',') == std::string::npos ? " " : "s ", ranks,
              " got other flags than rank 0 (the model, batch, steps, optimizer, schedule, validation, checkpoint "
              "or profile options): every rank must be given the same");
}

void init_shards(const TrainOptions& o, const CheckpointInfo& resume, FsdpModel& fsdp) {
  if (!o.resume_dir.empty())
    load_checkpoint_shards(resume, fsdp.layout(), fsdp.comm().rank(), fsdp.shards());
  else if (!o.init_from.empty())
    fsdp.load_params(SafetensorsReader(o.init_from));
  else
    fsdp.init_params(o.seed);
}

TrainResult run_training(const TrainOptions& o, const CheckpointInfo& resume, Communicator& comm,
                         TrainStep& step, const profile::ProfileOptions& profile) {
  const int rank = comm.rank(), world = comm.world();
  const bool lead = rank == 0;
  const ModelConfig& config = o.model;
  const int64_t start_step = o.resume_dir.empty() ? 0 : resume.step;
  const std::string tokenizer = o.tokenizer.empty() ? resume.tokenizer_path : o.tokenizer;

  const TokenFile data(o.data);
  data.check_vocab(config.vocab);
  std::unique_ptr<TokenFile> val;
  if (!o.val_data.empty() && o.eval_every > 0) {
    val = std::make_unique<TokenFile>(o.val_data);
    val->check_vocab(config.vocab);
  }
  const DataLoader loader(data, o.batch, o.seq, rank, world);
  const int64_t tokens_per_step = loader.tokens_per_micro_step() * o.grad_accum;  // all ranks
  const int64_t global_rows = static_cast<int64_t>(o.batch) * world * o.grad_accum;
  if (lead && !o.resume_dir.empty() && !resume.checksums)
    std::printf("%s\n", checkpoint_without_checksums_warning(resume.folder).c_str());
  if (lead && !o.resume_dir.empty() && resume.trainer.contains("global_batch_rows") &&
      resume.trainer["global_batch_rows"] != global_rows)
    std::printf("warning: %s was trained with %lld rows per step, this run uses %lld: the data "
                "order and the loss curve change\n",
                o.resume_dir.c_str(), resume.trainer["global_batch_rows"].get<long long>(),
                static_cast<long long>(global_rows));
  if (lead) {
    std::printf("model: %s preset, %lld parameters (V=%d D=%d L=%d H=%d) %s; %d rank%s x batch %d x %d tokens x "
                "%d accum = %lld tokens/step; data %s (%lld tokens)%s\n",
                config.preset.name, static_cast<long long>(param_table(config).total), config.vocab, config.dim,
                config.layers, config.heads, step.describe().c_str(), world, world > 1 ? "s" : "", o.batch, o.seq,
                o.grad_accum, static_cast<long long>(tokens_per_step), o.data.c_str(),
                static_cast<long long>(data.size()),
                start_step ? (", resumed at step " + std::to_string(start_step)).c_str() : "");
    std::fflush(stdout);
  }

  MetricsLog metrics(lead ? o.metrics_path : "", start_step > 0);
  profile::ProfileSession profiler(profile, rank);
  TrainResult result;
  const Stopwatch run_clock;
  double train_ms = 0;
  std::vector<double> gathered(5 * static_cast<size_t>(world), 0.0);  // see report()

  // Step t's metrics row and progress line (val_loss < 0: no validation at t).
  int64_t reported = start_step;
  auto report = [&](int64_t t, double val_loss) {
    const StepResult r = step.result(t);
    PYLON_CHECK(std::isfinite(r.loss) && std::isfinite(r.grad_norm), "training diverged at step ", t, ": loss ",
                r.loss, ", grad norm ", r.grad_norm, " (lower --lr?)");
    // One all-reduce of every rank's figures: [peak memory, energy, power, SM clock, power-capped
    // share] x world, each rank writing its own column.
    std::fill(gathered.begin(), gathered.end(), 0.0);
    const size_t w = static_cast<size_t>(world), me = static_cast<size_t>(rank);
    gathered[me] = static_cast<double>(r.peak_mem_bytes);
    gathered[w + me] = r.energy_j;
    gathered[2 * w + me] = r.power_w;
    gathered[3 * w + me] = r.sm_clock_mhz;
    gathered[4 * w + me] = r.power_capped_frac;
    {
      PYLON_RANGE("collective", "all_reduce");
      comm.all_reduce_sum(gathered.data(), gathered.size());
    }
    std::vector<int64_t> per_rank(gathered.begin(), gathered.begin() + world);
    auto column = [&](size_t c) { return std::vector<double>(gathered.begin() + c * w, gathered.begin() + (c + 1) * w); };
    const std::vector<double> energy = column(1);
    const bool measured = std::all_of(energy.begin(), energy.end(), [](double e) { return e >= 0; });
    auto mean = [&](size_t c) {
      const std::vector<double> v = column(c);
      return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(world);
    };
    const int64_t peak = *std::max_element(per_rank.begin(), per_rank.end());
    const float lr = lr_at(o.schedule, t - 1, o.steps);
    const double tokens_per_s = static_cast<double>(tokens_per_step) / (r.ms / 1e3);
    train_ms += r.ms;
    nlohmann::json row = {{"step", t},
                          {"loss", r.loss},
                          {"lr", lr},
                          {"grad_norm", r.grad_norm},
                          {"tokens_per_s", tokens_per_s},
                          {"step_ms", r.ms},
                          {"peak_mem_bytes", peak},
                          {"world", world}};
    if (world > 1) row["peak_mem_bytes_per_rank"] = per_rank;
    double energy_j = 0, power_w = 0, sm_mhz = 0;
    if (measured) {
      energy_j = std::accumulate(energy.begin(), energy.end(), 0.0);
      power_w = mean(2), sm_mhz = mean(3);
      row["energy_j"] = energy_j;
      row["tokens_per_j"] = energy_j > 0 ? static_cast<double>(tokens_per_step) / energy_j : 0.0;
      row["power_w"] = power_w;
      row["sm_clock_mhz"] = sm_mhz;
      row["power_capped_frac"] = mean(4);
    }
    if (val_loss >= 0) row["val_loss"] = result.final_val_loss = val_loss;
    step.add_metrics(t, row);
    metrics.write(row);
    if (lead && (t == start_step + 1 || t == o.steps || (o.log_every > 0 && t % o.log_every == 0) || val_loss >= 0)) {
      const std::string val_text = val_loss >= 0 ? "  val " + std::to_string(val_loss).substr(0, 6) : "";
      const std::string per_rank_text =
          world > 1 ? " (" + std::to_string(static_cast<long long>(tokens_per_s / world)) + "/rank)" : "";
      const double eta = train_ms / 1e3 / static_cast<double>(t - start_step) * static_cast<double>(o.steps - t);
      char power_text[64] = "";
      if (measured)
        std::snprintf(power_text, sizeof power_text, "  %.0f W %.0f MHz%s", power_w, sm_mhz, world > 1 ? "/GPU" : "");
      std::printf("step %6lld/%lld  loss %.4f%s  lr %.2e  norm %.3f  %.0f tok/s%s  %.1f ms  mem %.2f GB%s  eta %s\n",
                  static_cast<long long>(t), static_cast<long long>(o.steps), r.loss, val_text.c_str(),
                  static_cast<double>(lr), r.grad_norm, tokens_per_s, per_rank_text.c_str(), r.ms,
                  static_cast<double>(peak) / 1e9, power_text, format_duration(eta).c_str());
      std::fflush(stdout);
    }
    result.final_loss = static_cast<float>(r.loss);
    result.steps_done = t;
    result.peak_mem_bytes = peak;
    reported = t;
  };
  auto catch_up = [&](int64_t upto) {
    while (reported < upto) report(reported + 1, -1);
  };
  auto save = [&](int64_t t) {
    PYLON_RANGE("checkpoint", "checkpoint_save");
    const nlohmann::json trainer = {{"options", options_json(o, world)}, {"global_batch_rows", global_rows}};
    const std::string path = save_checkpoint(o.save_dir, {config, t, trainer, tokenizer}, step.checkpoint_shards());
    if (lead) std::printf("saved checkpoint %s\n", path.c_str());
  };

  for (int64_t t = start_step + 1; t <= o.steps; ++t) {
    profiler.step(t - 1 - start_step);
    profile::Range step_range("step", "train_step");
    if (step_range.on()) step_range.set_int("step", t);
    inject_test_faults(o.faults, rank, t);
    step.run(StepBatches(loader, t, o.grad_accum), lr_at(o.schedule, t - 1, o.steps));
    const bool eval_now = val && (t % o.eval_every == 0 || t == o.steps);
    const bool save_now = !o.save_dir.empty() && ((o.save_every > 0 && t % o.save_every == 0) || t == o.steps);
    catch_up(eval_now || save_now ? t - 1 : t - step.lag());  // step t runs meanwhile (lag 1)
    if (eval_now) report(t, step.evaluate(*val, o.eval_steps));
    if (save_now) {
      catch_up(t);
      save(t);
    }
  }
  catch_up(o.steps);
  if (world > 1 && lead) {
    std::printf("peak memory per rank:");
    for (int r = 0; r < world; ++r) std::printf(" %.2f GB", gathered[static_cast<size_t>(r)] / 1e9);
    std::printf("\n");
  }
  profiler.finish();
  comm.barrier();  // nobody tears down its connections while a peer may still need them
  result.seconds = run_clock.seconds();
  return result;
}

}  // namespace pylon
