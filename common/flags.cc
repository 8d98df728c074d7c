#include "common/flags.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "common/check.h"

namespace trainyard {

Flags& Flags::Value(const std::string& name, std::string default_value, std::string help) {
  order_.push_back(name);
  flags_[name] = Flag{false, std::move(default_value), std::move(help), {}};
  return *this;
}

Flags& Flags::Switch(const std::string& name, std::string help) {
  order_.push_back(name);
  flags_[name] = Flag{true, "", std::move(help), {}};
  return *this;
}

Flags& Flags::Alias(const std::string& short_name, const std::string& name) {
  aliases_[short_name] = name;
  return *this;
}

std::vector<std::string> Flags::All(const std::string& name) const {
  Get(name);
  return flags_.at(name).given;
}

Status Flags::Parse(const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    std::string a = args[i];
    if (a == "-h" || a == "--help") {
      help_ = true;
      continue;
    }
    if (auto alias = aliases_.find(a); alias != aliases_.end()) a = "--" + alias->second;
    if (a.rfind("--", 0) != 0 || a == "--") {
      positional_.push_back(a);
      continue;
    }
    const size_t eq = a.find('=');
    const std::string name = a.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    auto it = flags_.find(name);
    if (it == flags_.end())
      return InvalidArgumentError("unknown flag --" + name + " (--help lists them)");
    if (it->second.is_switch) {
      if (eq != std::string::npos) return InvalidArgumentError("--" + name + " takes no value");
      it->second.value = "1";
    } else if (eq != std::string::npos) {
      it->second.value = a.substr(eq + 1);
      it->second.given.push_back(it->second.value);
    } else if (i + 1 < args.size()) {
      it->second.value = args[++i];
      it->second.given.push_back(it->second.value);
    } else {
      return InvalidArgumentError("--" + name + " needs a value");
    }
  }
  return OkStatus();
}

std::optional<int> Flags::ParseOrExit(const std::vector<std::string>& args,
                                      const std::string& program, int positionals) {
  Status s = Parse(args);
  if (help_) {
    std::fputs(Help().c_str(), stdout);
    return 0;
  }
  if (s.ok() && positionals >= 0 && positional_.size() != static_cast<size_t>(positionals)) {
    s = positional_.size() > static_cast<size_t>(positionals)
            ? InvalidArgumentError("unexpected argument \"" + positional_[positionals] + "\"")
            : InvalidArgumentError("missing argument (" + std::to_string(positionals) +
                                   " expected)");
  }
  if (s.ok()) return std::nullopt;
  std::fprintf(stderr, "%s: error: %s\n%s", program.c_str(), std::string(s.message()).c_str(),
               Help().c_str());
  return 2;
}

const std::string& Flags::Get(const std::string& name) const {
  auto it = flags_.find(name);
  TY_CHECK(it != flags_.end()) << "undeclared flag --" << name;
  return it->second.value;
}

bool Flags::On(const std::string& name) const { return !Get(name).empty(); }

StatusOr<int64_t> Flags::Int(const std::string& name, int64_t lo, int64_t hi) const {
  const std::string& v = Get(name);
  char* end = nullptr;
  errno = 0;
  const long long n = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno != 0 || n < lo || n > hi) {
    return InvalidArgumentError("--" + name + " \"" + v + "\": must be an integer in [" +
                                std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return static_cast<int64_t>(n);
}

StatusOr<double> Flags::Double(const std::string& name, double lo, double hi) const {
  const std::string& v = Get(name);
  char* end = nullptr;
  const double d = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !std::isfinite(d) || d < lo || d > hi) {
    return InvalidArgumentError("--" + name + " \"" + v + "\": must be a number in [" +
                                std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return d;
}

std::string Flags::Help() const {
  std::string out = usage_ + "\n";
  for (const std::string& name : order_) {
    const Flag& f = flags_.at(name);
    std::string left = "  --" + name + (f.is_switch ? "" : " V");
    if (left.size() < 26) left.resize(26, ' ');
    out += left + " " + f.help;
    if (!f.is_switch && !f.value.empty()) out += " (default " + f.value + ")";
    out += "\n";
  }
  return out;
}

}  // namespace trainyard
