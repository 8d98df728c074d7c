// Certificates for tests, made by openssl: a test CA and certificates it signs.
#pragma once

#include <cstdlib>
#include <string>
#include <vector>

namespace trainyard::testing {

struct TestCert {
  std::string file;  // <dir>/<file>.pem and <dir>/<file>.key
  std::string cn;    // the subject's CN
  std::string san;   // subjectAltName, e.g. "IP:127.0.0.1,DNS:localhost"
};

// Makes <dir> (when missing), <dir>/ca.pem and ca.key (CN=trainyard-test-ca), and each of
// `certs` signed by that CA, valid for two days. False when openssl fails.
inline bool MakeTestPki(const std::string& dir, const std::vector<TestCert>& certs) {
  std::string script =
      "set -e; mkdir -p " + dir + "; cd " + dir +
      "; openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=trainyard-test-ca"
      " -keyout ca.key -out ca.pem 2>/dev/null; cert() { openssl req -newkey rsa:2048 -nodes"
      " -subj /CN=$2 -keyout $1.key -out $1.csr 2>/dev/null; printf 'subjectAltName=%s\\n' $3"
      " > $1.ext; openssl x509 -req -in $1.csr -CA ca.pem -CAkey ca.key -CAcreateserial"
      " -days 2 -extfile $1.ext -out $1.pem 2>/dev/null; }";
  for (const TestCert& c : certs) script += "; cert " + c.file + " " + c.cn + " " + c.san;
  return std::system(script.c_str()) == 0;
}

}  // namespace trainyard::testing
