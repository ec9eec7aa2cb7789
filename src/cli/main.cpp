// pylon: the command-line entry point. The only place that turns errors into exit codes.
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <string>

#include "cli/commands.h"
#include "core/error.h"

namespace {

struct Command {
  const char* name;
  int (*run)(int, char**);
  const char* summary;
};

constexpr Command kCommands[] = {
    {"train", pylon::run_train, "train MiniLLM, fully sharded over ranks (CPU, or CUDA GPUs through NCCL)"},
    {"eval", pylon::run_eval, "mean loss of a model over a token file"},
    {"generate", pylon::run_generate, "continue a prompt with a trained model"},
    {"tokenize", pylon::run_tokenize, "train a SentencePiece BPE model and write token files"},
    {"export", pylon::run_export, "write a model as a single-file edge model (f16/int8/int4)"},
    {"inspect", pylon::run_inspect, "print the header of an edge model file"},
    {"trace", pylon::run_trace, "merge per-rank traces, or analyze one (trace merge|analyze)"},
    {"roofline", pylon::run_roofline, "roofline verdicts per kernel from hardware counters"},
};

// A message on one line, whatever the user typed into it: a path or flag holding a line break
// would split it (every error is one line on stderr: docs/cli.md).
std::string one_line(const std::string& text) {
  std::string out;
  for (const char ch : text) out += ch == '\n' ? "\\n" : ch == '\r' ? "\\r" : std::string(1, ch);
  return out;
}

void print_usage(std::FILE* out) {
  std::fprintf(out, "usage: pylon <command> [flags]   (pylon <command> --help for its flags)\n\n");
  for (const auto& c : kCommands) std::fprintf(out, "  %-10s %s\n", c.name, c.summary);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    print_usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  for (const auto& c : kCommands) {
    if (std::strcmp(argv[1], c.name) != 0) continue;
    try {
      return c.run(argc, argv);
    } catch (const pylon::PeerLost& e) {  // another rank's end, not this one's error
      std::fprintf(stderr, "pylon %s: error: %s\n", c.name, one_line(e.what()).c_str());
      return pylon::kExitPeerLost;
    } catch (const pylon::Error& e) {
      std::fprintf(stderr, "pylon %s: error: %s\n", c.name, one_line(e.what()).c_str());
      return 1;
    } catch (const std::filesystem::filesystem_error& e) {  // a path the system refused: the user's to fix
      const std::string path = e.path1().empty() ? "" : e.path1().string() + ": ";
      std::fprintf(stderr, "pylon %s: error: %s%s\n", c.name, one_line(path).c_str(), e.code().message().c_str());
      return 1;
    } catch (const std::bad_alloc&) {
      std::fprintf(stderr, "pylon %s: error: out of memory\n", c.name);
      return 1;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "pylon %s: %s\n", c.name, one_line(e.what()).c_str());
      return 3;
    }
  }
  std::fprintf(stderr, "pylon: unknown command '%s' (pylon --help lists them)\n", one_line(argv[1]).c_str());
  return 2;
}
