#include "proc_status.h"

#include <fstream>
#include <sstream>
#include <string>

namespace fsdp_plan {

double proc_status_bytes(const char* field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    std::istringstream in(line);
    std::string name;
    double kib = 0;
    if (in >> name >> kib && name == field) return kib * 1024;
  }
  return 0;
}

}  // namespace fsdp_plan
