pub struct SimEngine;
