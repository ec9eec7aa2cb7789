// The pylon subcommands, one file each. Each parses argv[2..] with ArgParser, throws pylon::Error
// on bad input and returns the process exit code.
#pragma once

namespace pylon {

int run_train(int argc, char** argv);
int run_eval(int argc, char** argv);
int run_generate(int argc, char** argv);
int run_tokenize(int argc, char** argv);
int run_export(int argc, char** argv);
int run_inspect(int argc, char** argv);
int run_trace(int argc, char** argv);
int run_roofline(int argc, char** argv);

}  // namespace pylon
