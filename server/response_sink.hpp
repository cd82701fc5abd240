#pragma once
// response_sink: where a generation job writes its answer — one HTTP connection. All calls
// happen on the connection's strand.
#include <string>

namespace tandem::http {

class response_sink {
 public:
  virtual ~response_sink() = default;
  // A whole JSON response; ends the exchange.
  virtual void send_json(int status, std::string body) = 0;
  // Server-sent events: headers first, then framed events, then the end of the stream.
  virtual void begin_stream() = 0;
  virtual void stream(std::string bytes) = 0;
  virtual void end_stream() = 0;
  // The client went away; nothing written will arrive.
  virtual bool gone() const = 0;
};

}  // namespace tandem::http
