# ht_embed_text(INPUT OUTPUT VAR): OUTPUT is a C file defining
# "static const char VAR[]" with INPUT's text, regenerated when INPUT changes.
function(ht_embed_text input output var)
  file(READ "${input}" text)
  string(REPLACE "\\" "\\\\" text "${text}")
  string(REPLACE "\"" "\\\"" text "${text}")
  string(REPLACE "\n" "\\n\"\n\"" text "${text}")
  file(WRITE "${output}.tmp" "/* Generated from ${input} at configure time. */\nstatic const char ${var}[] =\n\"${text}\";\n")
  configure_file("${output}.tmp" "${output}" COPYONLY)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${input}")
endfunction()
