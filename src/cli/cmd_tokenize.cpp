// `fedshard tokenize --tokenizer SPEC [FILE]`: the ids of each document of a JSONL file (stdin by default), one
// JSON array per line, without BOS/EOS: what `prepare` writes of a document before its EOS. For checking a
// tokenizer against its reference library document by document.
#include <fstream>
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "data/jsonl.h"
#include "data/tokenizer.h"
#include "util/error.h"

namespace fedshard::cli {

Command add_tokenize(CLI::App& app) {
  struct Args {
    std::string tokenizer, input = "-", text_key = "text";
  };
  auto a = std::make_shared<Args>();
  Command c;
  c.app = app.add_subcommand("tokenize", "Print each JSONL document's token ids (one JSON array per line)");
  c.app->add_option("--tokenizer", a->tokenizer, data::kTokenizerSpecs)->required();
  c.app->add_option("input", a->input, "JSONL file, one object per line with the text under --text-key; - for stdin")
      ->capture_default_str();
  c.app->add_option("--text-key", a->text_key, "the key of a record's text")->capture_default_str();
  c.run = [a] {
    const auto tok = data::make_tokenizer(a->tokenizer);
    std::ifstream file;
    if (a->input != "-") {
      file.open(a->input, std::ios::binary);
      FS_CHECK(file, "cannot open ", a->input);
    }
    std::istream& in = a->input == "-" ? std::cin : file;
    data::JsonlParser parser(a->text_key, "");
    data::JsonlRecord record;
    std::string line, out;
    for (size_t line_no = 1; std::getline(in, line); ++line_no) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      try {
        parser.parse(line, record);
        out = "[";
        for (uint32_t id : tok->encode(record.text)) {
          if (out.size() > 1) out += ',';
          out += std::to_string(id);
        }
        out += "]\n";
      } catch (const Error& e) {
        throw Error(cat(a->input == "-" ? "stdin" : a->input, ":", line_no, ": ", e.what()));
      }
      std::cout << out;
    }
    FS_CHECK(!in.bad(), "cannot read ", a->input);
    return 0;
  };
  return c;
}

}  // namespace fedshard::cli
