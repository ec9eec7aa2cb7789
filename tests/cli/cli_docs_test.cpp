// docs/cli.md against the executable: every command that `pylon --help` lists has a `## pylon CMD`
// section, and the flags in that section's table are exactly the flags `pylon CMD --help` prints,
// with the same defaults where --help shows one.
//
// Every numeric flag's --help line shows its valid range, "[range: R]" (cli/args.h makes each
// numeric flag declare one); the table's range cell has it in backticks, and non-numeric flags
// leave that cell without code.
//
// The shape of docs/cli.md this reads: a heading `## pylon CMD` per command; in its section, table
// rows `| flag | default | range | meaning |` whose first cell is the flag in backticks (`--name` or
// `--name VALUE`), whose second cell holds the default in backticks where --help shows one
// (elsewhere it is free text) and whose third holds the range.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "support/run_command.h"

namespace pylon {
namespace {

const std::string kCliDoc = std::string(PYLON_DOCS_DIR) + "/cli.md";

// --help's flags: name (without --) -> the default and the range it shows ("" = none).
struct HelpFlag {
  std::string default_text, range;
};
using Flags = std::map<std::string, HelpFlag>;

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

// The commands of `pylon --help`: its lines "  NAME  summary" after the usage line.
std::vector<std::string> listed_commands() {
  const auto r = testing::run_pylon("--help");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::string> commands;
  static const std::regex row("^  ([a-z]+) +\\S.*$");
  for (const std::string& line : lines_of(r.out)) {
    std::smatch m;
    if (std::regex_match(line, m, row)) commands.push_back(m[1]);
  }
  return commands;
}

// The flags `pylon CMD --help` prints: a line whose first word is `--name` (the flag list), or
// `[--name]` anywhere (a usage line's optional flag); with "[default: X]" at its line's end.
Flags help_flags(const std::string& command) {
  const auto r = testing::run_pylon(command + " --help");
  EXPECT_EQ(r.exit_code, 0) << "pylon " << command << " --help: " << r.err;
  Flags flags;
  static const std::regex listed("^\\s+--([a-z0-9][a-z0-9-]*)\\b.*$");
  static const std::regex optional("\\[--([a-z0-9][a-z0-9-]*)\\]");
  static const std::regex with_default("\\[default: (.*)\\]$");
  // "[range: [0, 1)]", "[range: (0, 1]]", "[range: >= 1]", "[range: > 0]"
  static const std::regex with_range("\\[range: ([\\[(][^\\])]*[\\])]|[<>]=? [^\\]]*)\\]");
  for (const std::string& line : lines_of(r.out)) {
    std::smatch m, d, g;
    if (std::regex_match(line, m, listed)) {
      flags[m[1]] = {std::regex_search(line, d, with_default) ? std::string(d[1]) : "",
                     std::regex_search(line, g, with_range) ? std::string(g[1]) : ""};
    } else {
      for (std::sregex_iterator it(line.begin(), line.end(), optional), end; it != end; ++it)
        flags[(*it)[1]] = {};
    }
  }
  flags.erase("help");  // every command has it; docs/cli.md says so once
  return flags;
}

struct DocRow {
  std::vector<std::string> defaults, ranges;  // the `code` spans of its default and range cells
};
struct DocSection {
  std::map<std::string, DocRow> flags;
  std::vector<std::string> problems;                      // malformed rows
};

// The cells of a Markdown table row "| a | b | c |" (a `\|` inside a cell is not a separator).
std::vector<std::string> cells_of(const std::string& row) {
  std::vector<std::string> cells;
  std::string cell;
  for (size_t i = 1; i < row.size(); ++i) {
    if (row[i] == '\\' && i + 1 < row.size() && row[i + 1] == '|') {
      cell += '|';
      ++i;
    } else if (row[i] == '|') {
      cells.push_back(trim(cell));
      cell.clear();
    } else {
      cell += row[i];
    }
  }
  return cells;
}

// The `code` spans of a cell, in order.
std::vector<std::string> code_spans(const std::string& cell) {
  std::vector<std::string> spans;
  for (size_t b = cell.find('`'); b != std::string::npos; b = cell.find('`', b + 1)) {
    const size_t e = cell.find('`', b + 1);
    if (e == std::string::npos) break;
    spans.push_back(cell.substr(b + 1, e - b - 1));
    b = e;
  }
  return spans;
}

// docs/cli.md's sections by command: the rows of the tables under `## pylon CMD`.
std::map<std::string, DocSection> doc_sections(const std::string& text) {
  std::map<std::string, DocSection> sections;
  static const std::regex heading("^## pylon ([a-z]+)\\s*$");
  static const std::regex flag_code("^--([a-z0-9][a-z0-9-]*)( .*)?$");
  DocSection* current = nullptr;
  for (const std::string& line : lines_of(text)) {
    std::smatch m;
    if (std::regex_match(line, m, heading)) {
      current = &sections[m[1]];
      continue;
    }
    if (line.rfind("## ", 0) == 0 || line.rfind("# ", 0) == 0) current = nullptr;  // another section
    if (!current || line.rfind("|", 0) != 0) continue;
    const std::vector<std::string> cells = cells_of(line);
    if (cells.empty() || cells[0] == "flag" || cells[0].find("---") == 0) continue;  // header, rule
    const std::vector<std::string> first = code_spans(cells[0]);
    const std::string code = first.empty() ? "" : first[0];
    std::smatch f;
    if (!std::regex_match(code, f, flag_code)) {
      current->problems.push_back("a row whose first cell is not a `--flag`: " + line);
      continue;
    }
    const std::string name = f[1];
    if (current->flags.count(name)) current->problems.push_back("--" + name + " has two rows");
    if (cells.size() != 4) current->problems.push_back("--" + name + ": not 4 cells (flag, default, range, meaning)");
    current->flags[name] = {code_spans(cells.size() > 1 ? cells[1] : ""), code_spans(cells.size() > 2 ? cells[2] : "")};
  }
  return sections;
}

TEST(CliDocs, EveryCommandHasAFlagTableEqualToItsHelp) {
  std::ifstream in(kCliDoc);
  ASSERT_TRUE(in) << kCliDoc << " is missing";
  const std::string text{std::istreambuf_iterator<char>(in), {}};
  const std::map<std::string, DocSection> docs = doc_sections(text);

  const std::vector<std::string> commands = listed_commands();
  ASSERT_FALSE(commands.empty()) << "no command parsed from pylon --help";
  std::set<std::string> known;
  for (const std::string& command : commands) {
    known.insert(command);
    const auto section = docs.find(command);
    if (section == docs.end()) {
      ADD_FAILURE() << "docs/cli.md has no `## pylon " << command << "` section (pylon --help lists "
                    << command << ")";
      continue;
    }
    for (const std::string& p : section->second.problems)
      ADD_FAILURE() << "docs/cli.md, pylon " << command << ": " << p;
    const Flags help = help_flags(command);
    const auto& doc = section->second.flags;
    EXPECT_FALSE(help.empty()) << "pylon " << command << " --help: no flags parsed";
    for (const auto& [name, flag] : help) {
      const std::string& def = flag.default_text;
      const auto d = doc.find(name);
      if (d == doc.end()) {
        ADD_FAILURE() << "docs/cli.md: pylon " << command << " --" << name
                      << " is missing from its table (pylon " << command << " --help prints it)";
        continue;
      }
      const std::vector<std::string>& spans = d->second.defaults;
      if (!def.empty() && std::find(spans.begin(), spans.end(), def) == spans.end())
        ADD_FAILURE() << "docs/cli.md: pylon " << command << " --" << name << ": --help says [default: " << def
                      << "], but the table's default cell has no `" << def << "`";
      const std::vector<std::string> want_range =
          flag.range.empty() ? std::vector<std::string>{} : std::vector<std::string>{flag.range};
      if (d->second.ranges != want_range)
        ADD_FAILURE() << "docs/cli.md: pylon " << command << " --" << name << ": --help says "
                      << (flag.range.empty() ? "no range" : "[range: " + flag.range + "]")
                      << ", the table's range cell has " << d->second.ranges.size() << " code span(s)"
                      << (d->second.ranges.empty() ? "" : ": `" + d->second.ranges[0] + "`");
    }
    for (const auto& [name, spans] : doc)
      if (!help.count(name))
        ADD_FAILURE() << "docs/cli.md: pylon " << command << " --" << name
                      << " is in its table, but pylon " << command << " --help does not print it";
  }
  for (const auto& [command, section] : docs)
    if (!known.count(command))
      ADD_FAILURE() << "docs/cli.md has a `## pylon " << command << "` section, but pylon --help lists no "
                    << command << " command";
}

}  // namespace
}  // namespace pylon
