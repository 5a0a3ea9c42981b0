// Private to pd2bw_executor: access to the English corpus compiled into the library.
#pragma once

#include <string_view>

namespace pd2bw::executor::detail {

// The built-in training text (ASCII, about 15 KB); static storage, valid for the program's lifetime.
std::string_view builtin_corpus_text();

}  // namespace pd2bw::executor::detail
