# SDK package placeholder
