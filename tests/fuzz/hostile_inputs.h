// The inputs that crashed, hung or went quadratic in the job-spec readers (found by mutating
// specs), made in code: each must be read or refused with InvalidArgument, quickly.
#pragma once

#include <string>
#include <vector>

namespace trainyard::fuzz {

// A small spec that ParseJobSpec accepts; the hostile inputs change one field of it.
extern const char kValidSpecYaml[];

enum class Reader {
  kYaml,      // client::ParseYaml
  kJson,      // Json::Parse
  kSpecFile,  // client::ReadSpecFile of the text written to a temporary .yaml file
};

struct HostileInput {
  std::string name;  // a gtest name
  Reader reader = Reader::kYaml;
  std::string text;
  // Empty: the reader may accept the text or refuse it with InvalidArgument. Otherwise it must
  // refuse it with InvalidArgument, saying this.
  std::string refusal;
  // Where the reader accepts the text: likewise for spec::ParseJobSpec of the value.
  std::string spec_refusal;
};

// Every hostile input, made afresh (a few megabytes of text in all).
std::vector<HostileInput> HostileInputs();

}  // namespace trainyard::fuzz
