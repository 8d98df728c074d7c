// Command-line flags for the daemons: "--name value", "--name=value" and "--switch". Every flag
// is declared with its help; anything else is an error naming it.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace trainyard {

class Flags {
 public:
  // `usage` heads Help(); value flags take a default ("" when none).
  explicit Flags(std::string usage) : usage_(std::move(usage)) {}
  Flags& Value(const std::string& name, std::string default_value, std::string help);
  Flags& Switch(const std::string& name, std::string help);
  // `short_name` ("-o") stands for --name.
  Flags& Alias(const std::string& short_name, const std::string& name);

  // InvalidArgument naming an unknown flag or a value flag without its value. "-h"/"--help"
  // sets help(); other arguments are positional(). A value flag given again keeps every value
  // (All()); Get() is the last.
  Status Parse(const std::vector<std::string>& args);

  // Parse() for a program's main: on --help prints Help() to stdout and returns 0; on an error,
  // or a number of positional arguments other than `positionals` (-1: any), prints
  // "<program>: error: ..." and Help() to stderr and returns 2; nullopt to carry on.
  std::optional<int> ParseOrExit(const std::vector<std::string>& args, const std::string& program,
                                 int positionals);

  const std::string& Get(const std::string& name) const;
  bool On(const std::string& name) const;
  std::vector<std::string> All(const std::string& name) const;
  const std::vector<std::string>& positional() const { return positional_; }
  // The value as an integer or a number in [lo, hi]; InvalidArgument naming the flag.
  StatusOr<int64_t> Int(const std::string& name, int64_t lo, int64_t hi) const;
  StatusOr<double> Double(const std::string& name, double lo, double hi) const;
  bool help() const { return help_; }
  std::string Help() const;

 private:
  struct Flag {
    bool is_switch = false;
    std::string value;
    std::string help;
    std::vector<std::string> given;
  };
  std::string usage_;
  std::vector<std::string> order_;
  std::map<std::string, Flag> flags_;
  std::map<std::string, std::string> aliases_;
  std::vector<std::string> positional_;
  bool help_ = false;
};

}  // namespace trainyard
