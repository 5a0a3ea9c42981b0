// Helpers shared by the tests of the file formats: catching a SchemaError's message and checking that it
// starts with the expected JSON pointer.
#pragma once

#include <doctest/doctest.h>

#include <exception>
#include <functional>
#include <string>

#include "pd2bw/error.hpp"

namespace pd2bw::testing {

// The message of the SchemaError `f` throws, or a marker when it throws something else or nothing.
inline std::string schema_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const pd2bw::SchemaError& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("<not a SchemaError: ") + e.what() + ">";
  }
  return "<no error>";
}

inline void check_prefix(const std::string& message, const std::string& prefix) {
  INFO("message: " << message);
  INFO("expected prefix: " << prefix);
  CHECK(message.rfind(prefix, 0) == 0);
}

}  // namespace pd2bw::testing
