// The command lines of Shoal's binaries (shoal, shoald, shoal-client, shoal-controller), parsed
// with CLI11 the same way: --help ends with examples (SetExamples), and a bad or missing flag is
// one line on stderr that names the flag and says what it accepts, then where the help is, and
// exit status 2 (kUsageError), e.g.
//   shoald: --port: 'abc' is not a whole number >= 0 (listen port (config listen_port))
//   Run 'shoald --help' for the flags and examples.
// Header-only: CLI11 is header-only, and only the mains include this.
#pragma once

#include <CLI/CLI.hpp>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace shoal {

inline constexpr int kUsageError = 2;

// --help's last lines: "Examples:" and one indented command line each.
inline void SetExamples(CLI::App* app, const std::vector<std::string>& examples) {
  std::string text = "\nExamples:\n";
  for (const std::string& e : examples) text += "  " + e + "\n";
  app->footer(text);
}

namespace command_line_detail {

// The deepest (sub)command the parse reached: the one whose flags an error is about.
inline const CLI::App* Deepest(const CLI::App& app) {
  for (const CLI::App* sub : app.get_subcommands()) {
    if (sub->parsed()) return Deepest(*sub);
  }
  return &app;
}

// "shoal fl watch" for the fl watch subcommand of `program` (shoal).
inline std::string CommandPath(const std::string& program, const CLI::App& app,
                               const CLI::App* at) {
  std::string path;
  for (const CLI::App* a = at; a != nullptr; a = a->get_parent()) {
    const std::string name = a == &app ? program : a->get_name();
    path = path.empty() ? name : name + " " + path;
  }
  return path;
}

// "-c/--config" for an option named -c and --config; a positional's name in capitals.
inline std::string Display(const CLI::Option* o) {
  if (o->get_positional()) {
    std::string n = o->get_name(true, false);
    for (char& c : n) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return n;
  }
  std::string n = o->get_name(false, true);
  for (char& c : n) c = c == ',' ? '/' : c;
  return n;
}

// The option `name` (--port, -f, a positional's name) of `app` or its parents.
inline const CLI::Option* Find(const CLI::App* app, const std::string& name) {
  for (; app != nullptr; app = app->get_parent()) {
    for (const CLI::Option* o : app->get_options()) {
      if (o->check_name(name) || o->get_name() == name) return o;
    }
  }
  return nullptr;
}

// What a value of `o` must be, from its CLI11 type name.
inline std::string TypeWords(const CLI::Option* o) {
  const std::string t = o == nullptr ? "" : o->get_type_name();
  if (t.rfind("UINT", 0) == 0) return "a whole number >= 0";
  if (t.rfind("INT", 0) == 0) return "a whole number";
  if (t.rfind("FLOAT", 0) == 0 || t.rfind("NUMBER", 0) == 0) return "a number";
  if (t.rfind("BOOLEAN", 0) == 0) return "true or false";
  return "a value";
}

inline std::string WithHelp(const CLI::Option* o) {
  return o == nullptr || o->get_description().empty() ? "" : " (" + o->get_description() + ")";
}

// The flags `app` takes: its own, then its parents' (the mains let them fall through).
inline std::string FlagList(const CLI::App* app) {
  std::string out;
  for (; app != nullptr; app = app->get_parent()) {
    for (const CLI::Option* o : app->get_options()) {
      if (o->get_positional() || o->get_name() == "--help" || o->get_name() == "--version") {
        continue;
      }
      out += (out.empty() ? "" : ", ") + Display(o);
    }
  }
  return out;
}

inline std::string Commands(const CLI::App* app) {
  std::string out;
  for (const CLI::App* sub : app->get_subcommands({})) {
    out += (out.empty() ? "" : ", ") + sub->get_name();
  }
  return out;
}

inline std::string Number(const std::string& s) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str()) return s;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// CLI11's message (2.1's wording) as one that names the flag and what it accepts; CLI11's own
// where it is not one of these.
inline std::string Explain(const CLI::App* at, const CLI::ParseError& e) {
  const std::string what = e.what();
  std::smatch m;
  // A required flag or command is checked before the arguments left over: an unknown flag or
  // command among those is the mistake to name.
  if (dynamic_cast<const CLI::RequiredError*>(&e) != nullptr) {
    for (const std::string& arg : at->remaining()) {
      if (arg.rfind('-', 0) == 0 && arg.size() > 1) {
        const std::string flags = FlagList(at);
        return "unknown flag " + arg + (flags.empty() ? "" : "; the flags are " + flags);
      }
    }
    if (what == "A subcommand is required" && !at->remaining().empty()) {
      return "unknown command '" + at->remaining().front() + "'; the commands are " + Commands(at);
    }
  }
  if (std::regex_match(what, m,
                       std::regex("The following arguments? (?:was|were) not "
                                  "expected: (.*)"))) {
    // The first flag among them (CLI11 lists a value it could not place before its flag).
    std::string arg;
    std::istringstream words(m[1].str());
    for (std::string w; words >> w;) {
      if (arg.empty() || (w.rfind('-', 0) == 0 && arg.rfind('-', 0) != 0)) arg = w;
    }
    const std::string flags = FlagList(at);
    if (arg.rfind('-', 0) == 0) {
      return "unknown flag " + arg + (flags.empty() ? "" : "; the flags are " + flags);
    }
    const std::string commands = Commands(at);
    return "unexpected argument '" + arg + "'" +
           (commands.empty() ? "" : "; the commands are " + commands);
  }
  if (std::regex_match(what, m, std::regex("Could not convert: (\\S+) = (.*)"))) {
    const CLI::Option* o = Find(at, m[1].str());
    return m[1].str() + ": '" + m[2].str() + "' is not " + TypeWords(o) + WithHelp(o);
  }
  if (std::regex_match(what, m, std::regex("(\\S+): Value (.*) not in range (\\S+) to (\\S+)"))) {
    const CLI::Option* o = Find(at, m[1].str());
    // CLI::PositiveNumber (described "POSITIVE"): its lower bound prints as 0.000000.
    bool positive = false;
    for (int i = 0; o != nullptr; ++i) {
      const CLI::Validator* v = nullptr;
      try {  // CLI11 throws past the last validator (it never returns null)
        v = const_cast<CLI::Option*>(o)->get_validator(i);
      } catch (const CLI::OptionNotFound&) {
        break;
      }
      positive = positive || v->get_description() == "POSITIVE";
    }
    const double hi = std::strtod(m[4].str().c_str(), nullptr);
    const std::string range =
        positive     ? "a number > 0"
        : hi > 1e300 ? "a number >= " + Number(m[3].str())
                     : "a number from " + Number(m[3].str()) + " to " + Number(m[4].str());
    return m[1].str() + ": '" + m[2].str() + "' is not " + range + WithHelp(o);
  }
  if (std::regex_match(what, m, std::regex("(\\S+): (.*) not in \\{(.*)\\}"))) {
    std::string choices = m[3].str();
    for (size_t p = 0; (p = choices.find(',', p)) != std::string::npos; p += 2) {
      choices.replace(p, 1, ", ");
    }
    return m[1].str() + ": '" + m[2].str() + "' is not one of " + choices;
  }
  if (std::regex_match(what, m, std::regex("(\\S+): \\d+ required (\\S+) missing"))) {
    const CLI::Option* o = Find(at, m[1].str());
    const std::string type = TypeWords(o);
    return m[1].str() + " needs a value" + (type == "a value" ? "" : ": " + type) + WithHelp(o);
  }
  if (std::regex_match(what, m, std::regex("(\\S+) is required"))) {
    const CLI::Option* o = Find(at, m[1].str());
    return (o != nullptr ? Display(o) : m[1].str()) + " is required" + WithHelp(o);
  }
  if (what == "A subcommand is required") {
    return "a command is required: " + Commands(at);
  }
  return what;
}

}  // namespace command_line_detail

// Parses argv into `app`. nullopt: go on. Otherwise the status to exit with: 0 after --help or
// --version (printed to stdout), kUsageError after a bad command line (explained on stderr).
inline std::optional<int> ParseCommandLine(CLI::App& app, int argc, char** argv) {
  std::string program = argc > 0 ? argv[0] : "shoal";
  program = program.substr(program.rfind('/') + 1);
  try {
    app.parse(argc, argv);
    return std::nullopt;
  } catch (const CLI::Success& e) {  // --help, --help-all, --version
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    const CLI::App* at = command_line_detail::Deepest(app);
    const std::string path = command_line_detail::CommandPath(program, app, at);
    std::fprintf(stderr, "%s: %s\nRun '%s --help' for the flags and examples.\n", program.c_str(),
                 command_line_detail::Explain(at, e).c_str(), path.c_str());
    return kUsageError;
  }
}

}  // namespace shoal
